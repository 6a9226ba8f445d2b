r"""Generalization bounds of compression-based learners (classical and high-arity).

**Classical (Littlestone–Warmuth 1986, Floyd–Warmuth 1995).** Let :math:`(\kappa, \rho)` be a
compression scheme of size :math:`k` with side-information set :math:`B`, the sample
:math:`S \sim D^m` realizable, and :math:`h_S = \rho(\kappa(S))`. Fix an index set :math:`I`,
:math:`|I| = j \le k`, and :math:`b \in B`. The hypothesis :math:`h_{I,b} = \rho(S_I, b)` depends
only on the points in :math:`I`, so the other :math:`m - j` points are i.i.d. and independent of
it; if :math:`\mathrm{err}(h_{I,b}) > \varepsilon` they are all labelled correctly with
probability at most :math:`(1-\varepsilon)^{m-j}`. The learner's output is consistent with
:math:`S`, hence with :math:`S \setminus S_I`, so by a union bound over :math:`(I, b)`

.. math::

    \Pr[\mathrm{err}(h_S) > \varepsilon] \le |B| \sum_{j=0}^{k} \binom{m}{j}
    (1-\varepsilon)^{m-j} \le |B|\, N_k(m)\, e^{-\varepsilon (m-k)},
    \qquad N_k(m) = \sum_{j=0}^{k} \binom{m}{j}.

Setting the right side to :math:`\delta`:
:math:`\varepsilon = \frac{\ln |B| + \ln N_k(m) + \ln(1/\delta)}{m-k}`
(:func:`compression_bound`); :func:`compression_bound_exact` solves the middle expression
:math:`= \delta` for :math:`\varepsilon` by bisection (never larger).

**High-arity.** See :func:`high_arity_bound`.
"""

from __future__ import annotations

import math

__all__ = [
    "compression_bound",
    "compression_bound_exact",
    "high_arity_bound",
    "n_subsets",
]


def _check(m: int, k: int, delta: float, n_side: int) -> None:
    if int(k) != k or k < 0:
        raise ValueError(f"compression size k must be a non-negative integer, got {k}")
    if int(m) != m or m <= k:
        raise ValueError(f"sample size m must be an integer > k = {k}, got {m}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"confidence delta must lie in (0, 1), got {delta}")
    if int(n_side) != n_side or n_side < 1:
        raise ValueError(f"n_side (number of side-information values) must be >= 1, got {n_side}")


def n_subsets(m: int, k: int) -> int:
    r""":math:`N_k(m) = \sum_{j=0}^{\min(k,m)} \binom{m}{j}`, the number of index sets of size <= k.

    Example:
        >>> n_subsets(5, 2)  # 1 + 5 + 10
        16
    """
    return sum(math.comb(m, j) for j in range(min(k, m) + 1))


def compression_bound(m: int, k: int, delta: float, n_side: int = 1) -> float:
    r""":math:`\varepsilon = (\ln|B| + \ln N_k(m) + \ln(1/\delta)) / (m-k)`, capped at 1.

    With probability at least :math:`1-\delta` over :math:`m` i.i.d. realizable examples the
    compression learner's error is at most this.

    Example:
        >>> round(compression_bound(11, 1, 0.1), 5)  # (ln 12 + ln 10) / 10
        0.47875
    """
    _check(m, k, delta, n_side)
    eps = (math.log(n_side) + math.log(n_subsets(m, k)) + math.log(1.0 / delta)) / (m - k)
    return min(1.0, eps)


def compression_bound_exact(m: int, k: int, delta: float, n_side: int = 1) -> float:
    r"""Smallest :math:`\varepsilon` with :math:`|B|\sum_{j\le k}\binom mj(1-\varepsilon)^{m-j}
    \le \delta` (bisection to 1e-12); at most :func:`compression_bound`.

    Example:
        >>> round(compression_bound_exact(2, 0, 0.25), 6)  # (1-e)^2 = 1/4
        0.5
    """
    _check(m, k, delta, n_side)

    def tail(eps: float) -> float:
        return n_side * sum(math.comb(m, j) * (1.0 - eps) ** (m - j) for j in range(k + 1))

    if tail(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-12:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if tail(mid) <= delta else (mid, hi)
    return hi


def high_arity_bound(m: int, s: int, arity: int, delta: float, n_side: int = 1) -> float:
    r"""Error bound of a high-arity compression learner from :math:`m` samples per factor.

    Setting: factors :math:`X_1, \dots, X_k` (:math:`k` = ``arity``) with distributions
    :math:`\mu_i`; the learner sees :math:`m` i.i.d. points :math:`x_i^{(1..m)}` from each
    :math:`\mu_i` and the target's labels on all :math:`m^k` tuples they form; error is measured
    under the product :math:`\mu_1 \otimes \dots \otimes \mu_k`. A scheme keeps at most
    :math:`s` points per factor (index sets :math:`I_1, \dots, I_k`) plus :math:`b \in B` and
    rebuilds :math:`h` from the labelled sub-grid :math:`I_1 \times \dots \times I_k`.

    Derivation. The :math:`m^k` tuples are *not* independent, so count only independent ones:
    for fixed :math:`(I_1..I_k, b)`, every factor has :math:`n = m - s` unused points (at least);
    pair the :math:`j`-th unused point of every factor into the diagonal tuple
    :math:`(x_1^{(a_{1j})}, \dots, x_k^{(a_{kj})})`, :math:`j = 1..n`. These :math:`n` tuples use
    disjoint points, so they are i.i.d. from the product measure and independent of
    :math:`h_{I,b}`; if :math:`\mathrm{err}(h_{I,b}) > \varepsilon`, all :math:`n` are labelled
    correctly with probability at most :math:`(1-\varepsilon)^{n}`. The learner's output is
    consistent with the whole grid, hence with the diagonal. A union bound over
    :math:`N_s(m)^k |B|` choices gives

    .. math::

        \varepsilon = \frac{k \ln N_s(m) + \ln|B| + \ln(1/\delta)}{m - s}
        = O\!\Big(\frac{k s \ln m + \ln(1/\delta)}{m}\Big).

    It is a bound in the number of factor samples :math:`m`, not in the :math:`m^k` labels.

    Example:
        >>> round(high_arity_bound(11, 1, 2, 0.1), 5)  # (2 ln 12 + ln 10) / 10
        0.72724
    """
    if int(arity) != arity or arity < 1:
        raise ValueError(f"arity must be an integer >= 1, got {arity}")
    _check(m, s, delta, n_side)
    num = arity * math.log(n_subsets(m, s)) + math.log(n_side) + math.log(1.0 / delta)
    return min(1.0, num / (m - s))
