r"""Tail-index estimators a user can run on their own gradient noise to learn :math:`p`.

Both estimators look at the :math:`k` largest magnitudes
:math:`X_{(1)} \ge \dots \ge X_{(k+1)}` of a sample and the log-excesses
:math:`Y_i = \log X_{(i)} - \log X_{(k+1)}`, :math:`i \le k`.

* **Hill**: :math:`\hat\gamma = \frac1k\sum_i Y_i`, :math:`\hat a = 1/\hat\gamma`. For a Pareto-type
  tail :math:`P(|X|>x) = x^{-a}\ell(x)`, :math:`\sqrt{k}(\hat a - a) \to N(0, a^2)`
  (:math:`k \to \infty`, :math:`k/n \to 0`), giving the interval
  :math:`\hat a\,(1 \pm z/\sqrt{k})`.
* **Moment** (Dekkers-Einmahl-de Haan): with :math:`M_j = \frac1k\sum_i Y_i^j`,
  :math:`\hat\gamma = M_1 + 1 - \tfrac12 (1 - M_1^2/M_2)^{-1}`. For :math:`\gamma > 0`,
  :math:`\sqrt{k}(\hat\gamma - \gamma) \to N(0, 1 + \gamma^2)`; the interval for :math:`\gamma`
  is mapped through :math:`a = 1/\gamma` (monotone, so the endpoints map to endpoints).
  It uses the first two moments of the log-excesses and stays consistent for any extreme-value
  index, which makes it a useful cross-check on Hill.

The noise to feed them is a sample of gradient *errors* (e.g. minibatch gradient minus the
full-batch gradient, coordinates or norms); the estimate :math:`\hat a` says for which
:math:`p < \hat a` the :math:`p`-th moment can be trusted to be finite.

Example:
    >>> import torch
    >>> from heavytail_sgd.noise import SymmetricPareto
    >>> x = SymmetricPareto(1.5).sample(20000, generator=torch.Generator().manual_seed(0))
    >>> est = hill(x)
    >>> est.ci_low < 1.5 < est.ci_high
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import torch

__all__ = ["TailEstimate", "default_k", "estimate_tail_index", "hill", "moment_estimator"]


@dataclass(frozen=True)
class TailEstimate:
    """A tail-index estimate ``alpha`` with a two-sided ``level`` confidence interval."""

    alpha: float
    ci_low: float
    ci_high: float
    k: int
    n: int
    level: float
    method: str
    #: the extreme-value index estimate (``1/alpha`` where heavy-tailed; <= 0 where not)
    gamma: float | None = None

    @property
    def heavy_tailed(self) -> bool:
        """Whether the point estimate is a polynomial (heavy) tail, ``alpha < inf``."""
        return math.isfinite(self.alpha)

    def finite_moment(self, p: float) -> bool:
        """Whether the interval puts ``p`` below the tail index (moment plausibly finite)."""
        return p < self.ci_low


def default_k(n: int) -> int:
    """The default number of order statistics, ``round(sqrt(n))`` (at least 10).

    ``k`` trades variance (``~1/k``) against bias from the part of the law that is not yet
    Pareto; ``sqrt(n)`` keeps ``k/n -> 0`` while ``k -> infinity``.
    """
    if n < 12:
        raise ValueError(f"need at least 12 samples for a tail estimate, got n={n}")
    return min(n - 1, max(10, round(math.sqrt(n))))


def _log_excesses(x: torch.Tensor, k: int | None) -> tuple[torch.Tensor, int, int]:
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(x)
    a = x.detach().flatten().abs().to(torch.float64)
    a = a[torch.isfinite(a)]
    n = a.numel()
    if k is None:
        k = default_k(n)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k < n:
        raise ValueError(f"k must be an int in [1, n-1] = [1, {n - 1}], got {k!r}")
    top = torch.topk(a, k + 1).values
    if top[-1] <= 0:
        raise ValueError(f"the {k + 1} largest magnitudes include zero: choose a smaller k")
    return torch.log(top[:k]) - torch.log(top[-1]), k, n


def _z(level: float) -> float:
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    return NormalDist().inv_cdf(0.5 + level / 2)


def hill(x: torch.Tensor, k: int | None = None, *, level: float = 0.95) -> TailEstimate:
    r"""Hill's estimator of the tail index of ``|x|`` with an asymptotic-normal interval.

    .. math::
        \hat a = \Big(\frac1k\sum_{i=1}^{k}\log\frac{X_{(i)}}{X_{(k+1)}}\Big)^{-1},\qquad
        \hat a \pm z_{(1+\mathrm{level})/2}\,\frac{\hat a}{\sqrt k}.

    Args:
        x: samples (any shape; flattened; non-finite entries dropped).
        k: number of top order statistics (default :func:`default_k`).
        level: confidence level of the interval.

    Returns:
        A :class:`TailEstimate`.

    Example:
        >>> import torch
        >>> x = torch.tensor([float(i) for i in range(1, 101)]) ** -1.0  # not heavy: small a
        >>> hill(x, k=10).alpha > 0
        True
    """
    z = _z(level)
    y, k, n = _log_excesses(x, k)
    gamma = float(y.mean())
    if gamma <= 0:
        raise ValueError("the top order statistics are all tied: no tail to estimate")
    a = 1 / gamma
    half = z * a / math.sqrt(k)
    return TailEstimate(a, max(a - half, 0.0), a + half, k, n, level, "hill", gamma)


def _moment_variance(gamma: float) -> float:
    r"""Asymptotic variance of :math:`\sqrt{k}(\hat\gamma - \gamma)` for the moment estimator.

    :math:`1 + \gamma^2` for :math:`\gamma \ge 0` and
    :math:`(1-\gamma)^2(1-2\gamma)(1-\gamma+6\gamma^2)/((1-3\gamma)(1-4\gamma))` for
    :math:`\gamma < 0` (Dekkers, Einmahl and de Haan 1989, Theorem 3.1); both are 1 at 0.
    """
    if gamma >= 0:
        return 1 + gamma * gamma
    g = gamma
    return (1 - g) ** 2 * (1 - 2 * g) * (1 - g + 6 * g * g) / ((1 - 3 * g) * (1 - 4 * g))


def moment_estimator(x: torch.Tensor, k: int | None = None, *, level: float = 0.95) -> TailEstimate:
    r"""Dekkers-Einmahl-de Haan moment estimator of the tail index of ``|x|``.

    .. math::
        \hat\gamma = M_1 + 1 - \frac{1}{2}\Big(1 - \frac{M_1^2}{M_2}\Big)^{-1},\quad
        M_j = \frac1k\sum_{i=1}^k \Big(\log\frac{X_{(i)}}{X_{(k+1)}}\Big)^j,\quad
        \hat a = 1/\hat\gamma,

    with the interval :math:`\hat\gamma \pm z\,v(\hat\gamma)^{1/2}/\sqrt k` mapped to
    :math:`a` (:func:`_moment_variance`). :math:`\hat\gamma` estimates the extreme-value
    index of any law, not only of heavy tails: :math:`\hat\gamma \le 0` (Gaussian-like or
    bounded tails) is an answer, "not heavy-tailed", returned as ``alpha = inf``
    (``heavy_tailed`` False, every moment plausibly finite); ``gamma`` keeps the index. The
    interval's ends are ``inf`` where the interval for :math:`\gamma` reaches 0 or below.

    Args:
        x: samples (flattened; non-finite entries dropped).
        k: number of top order statistics (default :func:`default_k`).
        level: confidence level.

    Returns:
        A :class:`TailEstimate`.

    Raises:
        ValueError: bad ``k`` or ``level``, too few samples, or top order statistics that are
            all tied (nothing to estimate).

    Example:
        >>> import torch
        >>> u = torch.rand(20000, generator=torch.Generator().manual_seed(0))  # bounded tail
        >>> e = moment_estimator(u)
        >>> e.heavy_tailed, e.alpha, e.gamma < 0, e.finite_moment(4.0)
        (False, inf, True, True)
    """
    z = _z(level)
    y, k, n = _log_excesses(x, k)
    m1, m2 = float(y.mean()), float((y * y).mean())
    spread = 1 - m1 * m1 / m2 if m2 > 0 else 0.0
    if spread <= 0:  # all log-excesses equal (Jensen: m1^2 <= m2, equality iff constant)
        raise ValueError("the top order statistics are all tied: no tail to estimate")
    gamma = m1 + 1 - 0.5 / spread
    half = z * math.sqrt(_moment_variance(gamma) / k)
    lo_g, hi_g = gamma - half, gamma + half
    alpha = 1 / gamma if gamma > 0 else math.inf
    ci_low = 1 / hi_g if hi_g > 0 else math.inf
    ci_high = 1 / lo_g if lo_g > 0 else math.inf
    return TailEstimate(alpha, ci_low, ci_high, k, n, level, "moment", gamma)


def estimate_tail_index(
    x: torch.Tensor, method: str = "hill", k: int | None = None, *, level: float = 0.95
) -> TailEstimate:
    """Run the named estimator (``"hill"``, ``"hill-rb"`` or ``"moment"``) on ``x``.

    ``"hill-rb"`` is :func:`heavytail_sgd.tail_bias.hill_reduced_bias`, Hill with its drift in
    ``k/n`` removed (the estimator to use below ~10^5 samples; see the README's table).
    """
    if method == "hill":
        return hill(x, k, level=level)
    if method == "hill-rb":
        from .tail_bias import hill_reduced_bias  # it builds on this module

        return hill_reduced_bias(x, k, level=level)
    if method == "moment":
        return moment_estimator(x, k, level=level)
    raise ValueError(f"method must be 'hill', 'hill-rb' or 'moment', got {method!r}")
