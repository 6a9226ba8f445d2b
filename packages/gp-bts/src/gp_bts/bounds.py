r"""Bayesian cumulative-regret bounds of GP Thompson sampling on a finite candidate set.

Setting: :math:`f \sim GP(0, k)` with :math:`k(x, x) \le 1` on a finite set :math:`X`,
observations :math:`y = f(x) + \varepsilon`, :math:`\varepsilon \sim N(0, \sigma^2)`. Batched
TS runs :math:`T` rounds of :math:`Q` queries, :math:`N = TQ` evaluations; each query of
round :math:`t` is the maximiser of an independent posterior sample given :math:`D_{t-1}`.

**One evaluation.** Let :math:`U(x) = \mu_{t-1}(x) + \beta^{1/2}\sigma_{t-1}(x)`. Given
:math:`D_{t-1}` the query :math:`x_{t,q}` and the maximiser :math:`x^\star` have the same law
and :math:`U` is fixed, so :math:`E[U(x^\star)] = E[U(x_{t,q})]` and

.. math::
    E[f(x^\star) - f(x_{t,q})] = E[f(x^\star) - U(x^\star)]
    + \beta^{1/2} E[\sigma_{t-1}(x_{t,q})]

(the query is independent of :math:`f` given :math:`D_{t-1}`, so :math:`E f(x_{t,q}) = E
\mu_{t-1}(x_{t,q})`). The first term is at most :math:`\sum_x E(f(x)-U(x))^+ \le |X|
\varphi(\beta^{1/2}) = 1/N^2` for :math:`\beta_N = 2\log(|X| N^2/\sqrt{2\pi})`.

**Summing** over the :math:`N` evaluations and Cauchy-Schwarz:
:math:`BCR_N \le 1 + \sqrt{\beta_N N\, E\sum_i \sigma^2_{t-1}(x_i)}`.

**The batch.** Sequentially (:math:`Q = 1`), :math:`\sigma^2 \le C_1 \cdot \tfrac12
\log(1+\sigma^{-2}\sigma^2)` with :math:`C_1 = 2/\log(1 + \sigma^{-2})`, so the variance sum is
at most :math:`C_1\gamma_N`. In a batch the variance is the one at the *start* of the round;
bounding it by the fully-conditioned one costs the ratio :math:`\xi_Q`
(:func:`gp_bts.info_gain.variance_ratio_bound`), the earlier analyses' multiplicative factor:

.. math:: BCR_N \le 1 + \sqrt{C_1\,\xi_Q\,N\,\beta_N\,\gamma_N}  \quad\text{(with }Q\text{)}.

The initial uncertainty-sampling phase of those analyses makes :math:`\xi_Q` a constant. The
source paper (P06) shows that batched TS *without* that phase attains the sequential shape

.. math:: BCR_N \lesssim \sqrt{C_1\,N\,\beta_N\,\gamma_N}  \quad\text{(without }Q\text{)},

up to terms that do not multiply the leading one by :math:`Q`. Its exact lower-order terms
are not reproduced here: :func:`bcr_bound` with ``xi=1`` is the sequential bound at
:math:`N` evaluations, which is the shape the paper proves for the batch.

**Noiseless.** With exact observations the posterior variance is at most the one computed
with any fictitious noise :math:`\lambda > 0`, so the variance sum is at most
:math:`\min_\lambda 2\gamma_N(\lambda)/\log(1 + 1/\lambda)` (:func:`noiseless_variance_sum`);
on a finite set this stays bounded as :math:`\lambda \to 0` (by about the effective rank of
the kernel) while :math:`C_1\gamma_N(\sigma^2)` keeps growing: the noiseless bound is the
smaller one. (The paper's sharper noiseless rates are not reproduced.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

__all__ = [
    "bcr_bound",
    "beta",
    "c1",
    "noiseless_variance_sum",
]


def _pos_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    return v


def beta(n_evals: int, n_candidates: int) -> float:
    r""":math:`\beta_N = 2\log(|X| N^2/\sqrt{2\pi})`, floored at 0.

    Example:
        >>> round(beta(10, 100), 4)
        16.5828
    """
    _pos_int("n_evals", n_evals)
    _pos_int("n_candidates", n_candidates)
    return max(0.0, 2.0 * math.log(n_candidates * n_evals**2 / math.sqrt(2.0 * math.pi)))


def c1(noise_var: float, kernel_max: float = 1.0) -> float:
    r""":math:`C_1 = 2k_{\max}/\log(1 + k_{\max}/\sigma^2)`: :math:`\sigma^2_{t-1}(x) \le
    C_1 \cdot \tfrac12\log(1+\sigma^2_{t-1}(x)/\sigma^2)` whenever :math:`\sigma^2_{t-1} \le
    k_{\max}` (the function :math:`s \mapsto s/\log(1+s/\sigma^2)` increases).

    Example:
        >>> round(c1(1.0), 6) == round(2 / math.log(2), 6)
        True
    """
    if not (isinstance(noise_var, (int, float)) and math.isfinite(noise_var) and noise_var > 0):
        raise ValueError(f"noise_var must be positive and finite, got {noise_var!r}")
    if not kernel_max > 0:
        raise ValueError(f"kernel_max must be positive, got {kernel_max!r}")
    return 2.0 * kernel_max / math.log1p(kernel_max / noise_var)


def bcr_bound(
    gamma: float,
    n_evals: int,
    n_candidates: int,
    noise_var: float,
    *,
    xi: float = 1.0,
    variance_sum: float | None = None,
) -> float:
    r""":math:`1 + \sqrt{\beta_N N S}` with :math:`S = \xi\,C_1\gamma` (or ``variance_sum``).

    Args:
        gamma: :math:`\gamma_N` (use the certified upper end of a greedy estimate).
        n_evals: :math:`N = TQ`.
        n_candidates: :math:`|X|`.
        noise_var: :math:`\sigma^2` (enters :math:`C_1`).
        xi: the batch variance ratio :math:`\xi_Q \ge 1`; 1 for the bound without :math:`Q`.
        variance_sum: a bound on :math:`E\sum_i\sigma^2_{t-1}(x_i)` to use instead of
            :math:`\xi C_1 \gamma` (e.g. :func:`noiseless_variance_sum`).

    Example:
        >>> bcr_bound(2.0, 16, 100, 0.01) < bcr_bound(2.0, 16, 100, 0.01, xi=4.0)
        True
    """
    if not (math.isfinite(gamma) and gamma >= 0):
        raise ValueError(f"gamma must be finite and >= 0, got {gamma!r}")
    if not xi >= 1:
        raise ValueError(f"xi must be >= 1, got {xi!r}")
    s = xi * c1(noise_var) * gamma if variance_sum is None else float(variance_sum)
    if not (math.isfinite(s) and s >= 0):
        raise ValueError(f"variance_sum must be finite and >= 0, got {variance_sum!r}")
    return 1.0 + math.sqrt(beta(n_evals, n_candidates) * n_evals * s)


def noiseless_variance_sum(
    gamma_of_lambda: Callable[[float], float], lambdas: Sequence[float] = (1e-2, 1e-4, 1e-6, 1e-8)
) -> tuple[float, float]:
    r""":math:`\min_\lambda 2\gamma_N(\lambda)/\log(1+1/\lambda)` over a grid of fictitious noises.

    Args:
        gamma_of_lambda: :math:`\lambda \mapsto \gamma_N(\lambda)` (same :math:`N`).
        lambdas: the grid (positive).

    Returns:
        ``(value, best_lambda)``.

    Example:
        >>> v, lam = noiseless_variance_sum(lambda lam: 0.5 * math.log1p(4 / lam), [1.0])
        >>> round(v, 6) == round(math.log(5) / math.log(2), 6), lam
        (True, 1.0)
    """
    best = (math.inf, float("nan"))
    for lam in lambdas:
        if not lam > 0:
            raise ValueError(f"every lambda must be positive, got {lam!r}")
        v = 2.0 * float(gamma_of_lambda(lam)) / math.log1p(1.0 / lam)
        best = min(best, (v, float(lam)))
    if not math.isfinite(best[0]):
        raise ValueError("no finite value on the lambda grid")
    return best
