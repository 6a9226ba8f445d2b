r"""A reduced-bias Hill estimator: the linear drift of the Hill plot in :math:`k/n` regressed out.

**Why Hill is biased.** Write the scaled log-spacings of the top order statistics
:math:`X_{(1)} \ge X_{(2)} \ge \dots` as

.. math:: Z_j = j\,(\log X_{(j)} - \log X_{(j+1)}), \qquad j = 1, \dots, k,

so that Hill's estimate is their mean, :math:`\hat\gamma_H(k) = \frac1k\sum_{j\le k} Z_j`. For an
exact Pareto tail the :math:`Z_j` are i.i.d. :math:`\gamma E_j` with :math:`E_j \sim`
Exp(1) (Rényi's representation), and Hill is unbiased. For a tail that is Pareto only to first
order, :math:`U(t) = C t^\gamma (1 + \beta' t^{\rho} + o(t^\rho))` (:math:`U` the tail quantile
function, :math:`\rho < 0` the second-order index), the same representation gives to first
order

.. math:: Z_j \approx \big(\gamma + b\,(j/(k+1))^{-\rho}\big) E_j, \qquad b \propto (n/k)^{\rho},

(the exponential regression model of Beirlant, Dierckx, Goegebeur and Matthys, 1999), so
:math:`E\hat\gamma_H(k) \approx \gamma + b/(1-\rho)`: a bias that grows with :math:`k/n`.
Symmetric :math:`\alpha`-stable laws have :math:`\rho = -1` (their tail expands as
:math:`c_1 x^{-\alpha} + c_2 x^{-2\alpha} + \dots`), and the measured Hill plot of SαS noise
with :math:`\alpha = 1.7` indeed drifts linearly in :math:`k/n` (``docs/tail-index.md``).

**The estimator.** With :math:`\rho = -1` fixed the model is linear in :math:`(\gamma, b)`:
:math:`E Z_j = \gamma + b x_j`, :math:`x_j = j/(k+1)`. Ordinary least squares of :math:`Z_j` on
:math:`(1, x_j)` gives the intercept

.. math:: \hat\gamma_{RB} = \sum_{j\le k} c_j Z_j, \qquad c = A(A^\top A)^{-1}e_1,\;
    A = [\mathbf 1, x],

which is unbiased under the model for any :math:`b` (the weights satisfy :math:`\sum c_j = 1`,
:math:`\sum c_j x_j = 0`). Its variance under the model at :math:`b = 0` is
:math:`\gamma^2\sum_j c_j^2` (independent exponentials have variance :math:`\gamma^2`), which
for large :math:`k` is :math:`\approx 4\gamma^2/k` (:math:`\int_0^1 (4-6x)^2dx = 4`): four times
Hill's at the same :math:`k`, the price of estimating the drift. The default
:math:`k = 4\sqrt n` therefore has the spread of Hill at :math:`\sqrt n`, with the drift removed.
The interval is :math:`\hat\gamma \pm z\hat\gamma\|c\|_2`, mapped to :math:`a = 1/\gamma`
(monotone: the ends map to the ends; an end is ``inf`` where the interval reaches 0).

If the true :math:`\rho` is not :math:`-1` the correction removes most, not all, of the drift;
an exact Pareto tail (:math:`b = 0`) costs only the variance.

Example:
    >>> import torch
    >>> from heavytail_sgd.noise import SymmetricPareto
    >>> x = SymmetricPareto(1.5).sample(20000, generator=torch.Generator().manual_seed(0))
    >>> est = hill_reduced_bias(x)
    >>> est.ci_low < 1.5 < est.ci_high, est.k
    (True, 564)
"""

from __future__ import annotations

import math

import torch

from .tail import TailEstimate, _log_excesses, _z

__all__ = ["default_k_reduced_bias", "hill_reduced_bias", "intercept_weights"]


def default_k_reduced_bias(n: int) -> int:
    """``4 round(sqrt(n))`` (at most ``n // 4``, at least 10): Hill's spread at ``sqrt(n)``."""
    if n < 12:
        raise ValueError(f"need at least 12 samples for a tail estimate, got n={n}")
    return min(n - 1, max(10, min(4 * round(math.sqrt(n)), n // 4)))


def intercept_weights(k: int) -> torch.Tensor:
    r"""The weights :math:`c` with :math:`\hat\gamma_{RB} = \sum_j c_j Z_j` (float64, length k).

    Least squares of :math:`Z_j` on :math:`(1, j/(k+1))`, intercept: in closed form,
    :math:`c_j = \frac1k - \bar x (x_j - \bar x)/S_{xx}`,
    :math:`S_{xx} = \sum_j (x_j-\bar x)^2`.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 3:
        raise ValueError(f"k must be an int >= 3 to fit an intercept and a slope, got {k!r}")
    x = torch.arange(1, k + 1, dtype=torch.float64) / (k + 1)
    xbar = x.mean()
    dx = x - xbar
    return 1 / k - xbar * dx / (dx * dx).sum()


def hill_reduced_bias(
    x: torch.Tensor, k: int | None = None, *, level: float = 0.95
) -> TailEstimate:
    r"""Hill's estimator with its linear drift in :math:`k/n` removed (module docstring).

    Args:
        x: samples (any shape; flattened; non-finite entries dropped).
        k: number of top order statistics (default :func:`default_k_reduced_bias`,
            ``4 sqrt(n)``).
        level: confidence level of the interval.

    Returns:
        A :class:`~heavytail_sgd.tail.TailEstimate` with ``method="hill-rb"``. A fitted
        :math:`\hat\gamma \le 0` (possible at small ``k`` on light tails) is returned as
        ``alpha = inf``, "not heavy-tailed".
    """
    z = _z(level)
    n_finite = int(torch.isfinite(torch.as_tensor(x)).sum())
    if k is None:
        k = default_k_reduced_bias(n_finite)
    if isinstance(k, bool) or not isinstance(k, int) or not 3 <= k <= n_finite - 2:
        raise ValueError(f"k must be an int in [3, n-2] = [3, {n_finite - 2}], got {k!r}")
    y, _, n = _log_excesses(x, k + 1)  # k + 1 top log-excesses give k spacings
    # y_i = log X_(i) - log X_(k+2), i <= k + 1; spacings log X_(j) - log X_(j+1) for j <= k
    spacings = y[:k] - y[1 : k + 1]
    if float(y[0]) <= 0:
        raise ValueError("the top order statistics are all tied: no tail to estimate")
    j = torch.arange(1, k + 1, dtype=torch.float64)
    c = intercept_weights(k)
    gamma = float((c * j * spacings).sum())
    half = z * abs(gamma) * float(torch.linalg.vector_norm(c))
    lo_g, hi_g = gamma - half, gamma + half
    alpha = 1 / gamma if gamma > 0 else math.inf
    ci_low = 1 / hi_g if hi_g > 0 else math.inf
    ci_high = 1 / lo_g if lo_g > 0 else math.inf
    return TailEstimate(alpha, ci_low, ci_high, k, n, level, "hill-rb", gamma)
