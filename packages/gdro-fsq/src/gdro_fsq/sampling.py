r"""Which groups to query in a round: inclusion probabilities and a fixed-size sampler.

A round that may query :math:`r` of the :math:`m` groups picks a set :math:`S` with
:math:`|S| = r` and known inclusion probabilities :math:`\pi_i = P(i \in S)`,
:math:`\sum_i \pi_i = r`, :math:`0 < \pi_i \le 1`. Any unbiased importance-weighted estimate then
divides by :math:`\pi_i`.

The design of :class:`~gdro_fsq.optim.GDROFSQ` mixes a part that follows the current weights
:math:`q` with uniform exploration,

.. math:: \pi = (1 - \gamma)\, a(q, r) + \gamma\, \tfrac{r}{m}\mathbf 1,
    \qquad a_i(q, r) = \min(1, c\, q_i),\ \ \textstyle\sum_i a_i = r,

where :math:`a` is the capped ("water-filled") allocation of :func:`capped_allocation`. A set
with exactly these marginals is drawn by systematic sampling (:func:`systematic_sample`).

Example:
    >>> import torch
    >>> capped_allocation(torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64), 2)
    tensor([1.0000, 0.6667, 0.3333], dtype=torch.float64)
"""

from __future__ import annotations

import math
import operator

import torch
from torch import Tensor

__all__ = [
    "capped_allocation",
    "check_sample_size",
    "inclusion_probabilities",
    "max_weight_sum",
    "second_moment_proxy",
    "systematic_sample",
    "uniform_probabilities",
]


def check_sample_size(r: object, n_groups: int) -> int:
    """Return ``r`` as an int; raise ``ValueError`` unless it is an integer in ``[1, n_groups]``.

    Example:
        >>> check_sample_size(3, 5)
        3
    """
    if isinstance(r, bool) or not hasattr(r, "__index__"):
        raise ValueError(f"the sample size r_t must be an integer in [1, {n_groups}], got {r!r}")
    try:
        value = operator.index(r)  # type: ignore[arg-type]
    except (TypeError, RuntimeError):
        raise ValueError(
            f"the sample size r_t must be an integer in [1, {n_groups}], got {r!r}"
        ) from None
    if not 1 <= value <= n_groups:
        raise ValueError(f"the sample size r_t must lie in [1, {n_groups}], got {value}")
    return value


def capped_allocation(q: Tensor, r: int) -> Tensor:
    r"""The allocation :math:`a_i = \min(1, c\,q_i)` with :math:`\sum_i a_i = r`.

    The largest weights are capped at 1 one by one: with the :math:`k` largest capped,
    :math:`c = (r - k) / \sum_{j > k} q_{(j)}`, and :math:`k` is the first count for which the
    largest uncapped entry satisfies :math:`c\,q_{(k+1)} \le 1` (it exists: at :math:`k = r - 1`,
    :math:`c\,q_{(r)} \le 1`). Uncapped mass that has underflowed to 0 is shared uniformly.

    Args:
        q: a probability vector, shape ``(m,)``.
        r: the set size, ``1 <= r <= m``.

    Returns:
        ``a`` with ``0 <= a <= 1`` and ``a.sum() == r`` (to rounding), dtype of ``q``.
    """
    m = q.numel()
    r = check_sample_size(r, m)
    order = torch.argsort(q, descending=True, stable=True)
    qs = q[order].clamp(min=0)
    tail = qs.flip(0).cumsum(0).flip(0)  # tail[k] = sum_{j >= k} qs[j]
    k, c = 0, math.inf
    for k in range(r):
        rest = float(tail[k])
        if rest <= 0:
            c = math.inf
            break
        c = (r - k) / rest
        if c * float(qs[k]) <= 1:
            break
    a_sorted = torch.empty_like(qs)
    a_sorted[:k] = 1
    if math.isinf(c):
        a_sorted[k:] = (r - k) / (m - k)
    else:
        a_sorted[k:] = (c * qs[k:]).clamp(max=1)
    a = torch.empty_like(a_sorted)
    a[order] = a_sorted
    return a


def inclusion_probabilities(q: Tensor, r: int, gamma: float) -> Tensor:
    r""":math:`\pi = (1-\gamma)\,a(q, r) + \gamma\, r/m`: the marginals of the FSQ query set.

    Args:
        q: the current group weights, shape ``(m,)``.
        r: how many groups this round queries.
        gamma: the exploration rate in ``[0, 1]``.

    Returns:
        ``pi`` with ``sum(pi) = r`` and ``pi_i >= gamma * r / m``; all ones when ``r = m``.

    Example:
        >>> inclusion_probabilities(torch.tensor([0.5, 0.25, 0.25]), 1, 0.3)
        tensor([0.4500, 0.2750, 0.2750])
    """
    if not 0 <= gamma <= 1:
        raise ValueError(f"the exploration rate must lie in [0, 1], got {gamma!r}")
    m = q.numel()
    return (1 - gamma) * capped_allocation(q, r) + gamma * (r / m)


def second_moment_proxy(q: Tensor, pi: Tensor) -> float:
    r""":math:`s = \sum_i q_i/\pi_i`: it bounds :math:`\mathbb E\sum_i q_i \hat c_i^2` for any
    :math:`c \in [0, 1]^m` and :math:`\hat c_i = c_i \mathbb 1[i\in S]/\pi_i`.

    For the FSQ design :math:`\pi = (1-\gamma)a(q, r) + \gamma r/m` it is at most :math:`m/r`
    (docs/math.md, "Why the variance is m/r"), with equality at uniform :math:`q`.

    Example:
        >>> second_moment_proxy(torch.full((4,), 0.25), torch.full((4,), 0.5))
        2.0
    """
    return float((q / pi).sum())


def max_weight_sum(q: Tensor, pi: Tensor, r: int) -> float:
    r""":math:`\kappa = \max_{|S| = r}\sum_{i\in S} q_i/\pi_i`: the sum of the ``r`` largest ratios.

    The importance-weighted gradient :math:`g = \sum_{i\in S}(q_i/\pi_i)\nabla\ell_i` has
    :math:`\|g\| \le \kappa G` surely, whichever set is drawn. For the FSQ design
    :math:`\kappa \le 2/(1-\gamma)`, and :math:`\kappa = 1` when :math:`r = m`.

    Example:
        >>> max_weight_sum(torch.tensor([0.5, 0.3, 0.2]), torch.tensor([1.0, 0.6, 0.4]), 2)
        1.0
    """
    r = check_sample_size(r, q.numel())
    return float(torch.topk(q / pi, r).values.sum())


def uniform_probabilities(m: int, r: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """Inclusion probabilities ``r/m`` of a uniform ``r``-subset of ``m`` groups."""
    r = check_sample_size(r, m)
    return torch.full((m,), r / m, dtype=dtype)


def systematic_sample(pi: Tensor, generator: torch.Generator | None = None) -> Tensor:
    r"""Draw a set of exactly :math:`r = \sum_i \pi_i` distinct indices with
    :math:`P(i \in S) = \pi_i`.

    The indices are put in a random order, the unit intervals of the cumulative sums
    :math:`[C_{i-1}, C_i)` are laid on :math:`[0, r)`, and the points :math:`u, u+1, \dots, u+r-1`
    (:math:`u \sim U[0,1)`) pick the intervals they fall in. An interval of length
    :math:`\pi_i \le 1` holds at most one point, and holds one with probability :math:`\pi_i`.

    Args:
        pi: inclusion probabilities in ``[0, 1]`` with an integer sum ``r >= 1``.
        generator: the random source (for determinism under a seed).

    Returns:
        The chosen indices, sorted, as a ``long`` tensor of length ``r``.
    """
    total = float(pi.sum())
    r = round(total)
    if r < 1 or abs(total - r) > 1e-6 * max(1, r) or bool((pi < -1e-12).any()):
        raise ValueError(f"inclusion probabilities must be >= 0 with an integer sum, got {pi}")
    if bool((pi > 1 + 1e-9).any()):
        raise ValueError(f"inclusion probabilities must be <= 1, got max {float(pi.max())}")
    m = pi.numel()
    perm = torch.randperm(m, generator=generator)
    cum = pi.to(torch.float64)[perm].clamp(0, 1).cumsum(0)
    cum = cum * (r / float(cum[-1]))  # absorb rounding: the last boundary is exactly r
    u = float(torch.rand((), generator=generator, dtype=torch.float64))
    points = u + torch.arange(r, dtype=torch.float64)
    pos = torch.searchsorted(cum, points, right=True).clamp(max=m - 1)
    chosen = perm[pos]
    return torch.sort(chosen).values
