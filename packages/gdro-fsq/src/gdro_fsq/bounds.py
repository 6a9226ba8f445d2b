r"""The error bounds of :class:`~gdro_fsq.fsq.GDROFSQ`: pure functions of its running sums.

Every bound is ``(player 1's regret + [player 1's noise] + player 2's terms) / t``. Player 1's
regret (:func:`theta_regret`) and its high-probability noise (:func:`theta_noise`) are written
once here and shared by the in-expectation bound (:func:`fsq_bound`), the high-probability
bound (:func:`fsq_bound_hp`) and its implicit-exploration variant (:func:`fsq_bound_hp_ix`).
Derivations: ``docs/math.md`` ("Tracked bound", "High-probability bound", "Implicit
exploration").
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "HP_GRID",
    "HP_GRID_IX",
    "fsq_bound",
    "fsq_bound_hp",
    "fsq_bound_hp_ix",
    "ix_grid",
    "theta_noise",
    "theta_regret",
]


def theta_regret(
    *, reg_radius: float, lr_theta: float, grad_bound: float, k_theta: float, lag: float = 0.0
) -> float:
    r"""Player 1's regret bound :math:`\frac{R^2\sqrt{K_t+\lambda}}{2c_\theta} +
    c_\theta G^2\sqrt{K_t}`.

    Proximal FTRL (or SGD) with the step :math:`c_\theta/\sqrt{K_t}` on gradients with
    :math:`\|c_jg_j\|^2 \le G^2 k_j`, :math:`K_t = \sum_{j\le t} k_j` (``k_theta``: the sure
    bounds :math:`(c_j\kappa_j)^2` or the observed :math:`\|c_jg_j\|^2/G^2`), :math:`R` the
    range of the regulariser (``reg_radius``), :math:`\lambda` the look-ahead of the anchored
    FTRL (``lag``; 0 otherwise). docs/math.md, "Regret of player 1".

    Example:
        >>> theta_regret(reg_radius=2.0, lr_theta=1.0, grad_bound=1.0, k_theta=4.0)
        6.0
    """
    return reg_radius**2 * math.sqrt(k_theta + lag) / (2 * lr_theta) + lr_theta * grad_bound**2 * (
        math.sqrt(k_theta)
    )


def theta_noise(*, radius: float, noise_sq_sum: float, delta: float) -> float:
    r"""Player 1's noise at probability :math:`1-\delta`: :math:`D\sqrt{2N_t}
    (\sqrt{\log(4/\delta)} + \sqrt{\log(8/\delta)})`.

    A scalar Azuma term and the norm of a Hilbert-space martingale (Pinelis) of the gradient
    noise, whose increments are bounded by :math:`c_j(\kappa_j + 1)G` (``noise_sq_sum`` is
    :math:`N_t = G^2\sum_j c_j^2(\kappa_j+1)^2`). docs/math.md, "High-probability bound".

    Example:
        >>> round(theta_noise(radius=1.0, noise_sq_sum=0.5, delta=0.5), 6)
        3.107136
    """
    return (
        radius
        * math.sqrt(2 * noise_sq_sum)
        * (math.sqrt(math.log(4 / delta)) + math.sqrt(math.log(8 / delta)))
    )


def _check_t_delta(t: float, delta: float | None = None) -> None:
    if not t > 0:
        raise ValueError(f"the bound needs t > 0, got {t}")
    if delta is not None and not (0 < delta < 1):
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")


def _hp_player2_common(
    m: int, eta_q: float, second_moment_sum: float, kappa_sq_sum: float, delta: float
) -> float:
    r"""Player 2's terms shared by both high-probability bounds: its regret on the estimates
    (:math:`\log m/\eta_t + A_t`) and the played-mixture martingale (Azuma)."""
    return (
        math.log(m) / eta_q
        + second_moment_sum
        + math.sqrt(0.5 * kappa_sq_sum * math.log(4 / delta))
    )


def fsq_bound(
    t: float,
    var_sum: float,
    n_groups: int,
    *,
    kappa_sq_sum: float,
    reg_radius: float,
    grad_bound: float,
    lr_theta: float,
    lr_q: float,
    loss_bound: float = 1.0,
    lag: float = 0.0,
    q_cap: float = 1.0,
    adaptive_v0: float | None = None,
    theta_sq_sum: float | None = None,
) -> float:
    r"""The optimization-error bound tracked by :class:`~gdro_fsq.fsq.GDROFSQ` after ``t`` rounds.

    ``theta_sq_sum``, when given, is the :math:`K_t` of the :math:`\theta` regret terms (the
    observed :math:`\sum_j\|c_jg_j\|^2/G^2` of ``theta_step="observed"``, docs/math.md, "Observed
    gradient step"); otherwise they use ``kappa_sq_sum``.

    .. math::

        \varepsilon_t \le \frac{2}{t}\Big[\frac{R^2\sqrt{K_t + \lambda}}{2c_\theta}
        + c_\theta G^2\sqrt{K_t} + B\Big(\big(\tfrac{1}{c_q} + 2c_q\big)\sqrt{V_t\log m}
        + \frac{\log m}{\bar\eta}\Big)\Big],
        \qquad V_t = \sum_{j\le t} v(r_j),\quad K_t = \sum_{j\le t}\kappa_j^2,

    (``t``: the number of rounds, or :math:`C_t = \sum_j c_j` with round weights, docs/math.md,
    "Round weights"), with :math:`R` the range of the :math:`\theta` regulariser
    (``reg_radius``: :math:`2D` for
    the proximal FTRL and SGD, :math:`D + \|\theta_1\|` for FTRL anchored at
    :math:`\theta_1`), :math:`G` the per-sample gradient bound, :math:`B` the loss bound,
    :math:`\kappa_j \le 2/(1-\gamma_j)` the bound on the round's importance-weight sum
    (:math:`\kappa = 1` at :math:`r = m`), :math:`\lambda` the look-ahead term of the anchored
    FTRL (``lag``; 0 otherwise), :math:`\eta^\theta = c_\theta/\sqrt{K}` and
    :math:`\eta^q_t = \min(c_q\sqrt{\log m/V_t}, \bar\eta)`, :math:`\bar\eta` (``q_cap``) the
    smallest step cap of the rounds so far, :math:`v(r) = m/r - 3/4`
    (:func:`~gdro_fsq.estimates.variance_proxy`; ``var_sum`` is :math:`V_t`) (docs/math.md). Since
    :math:`1 \le \kappa_j \le 4` and :math:`m/(4r_j) \le v(r_j) \le m/r_j` it is
    :math:`O(\frac1t\sqrt{\sum_j (m/r_j)\log m})`. With ``adaptive_v0`` (the adaptive step
    :math:`\eta_t = \min(c_q\sqrt{\log m/(v_0 + X_{t-1})}, \bar\eta_t)` on the observed
    variances :math:`X`) the ``q`` part is :math:`B\big((\tfrac1{c_q} + 2\sqrt2 c_q)
    \sqrt{(v_0 + V_t)\log m} + 4\log_2(1 + V_t/v_0) + \log m/\bar\eta\big)` (docs/math.md,
    "Adaptive q step").

    Example:
        >>> kw = dict(kappa_sq_sum=100.0, reg_radius=2, grad_bound=1, lr_theta=1.4, lr_q=1.0)
        >>> fsq_bound(100, 100 * 10.0, 10, **kw) > fsq_bound(100, 100 * 1.0, 10, **kw)
        True
    """
    _check_t_delta(t)
    theta = theta_regret(
        reg_radius=reg_radius,
        lr_theta=lr_theta,
        grad_bound=grad_bound,
        k_theta=kappa_sq_sum if theta_sq_sum is None else theta_sq_sum,
        lag=lag,
    )
    log_m = math.log(n_groups)
    if adaptive_v0 is None:
        q = (1 / lr_q + 2 * lr_q) * math.sqrt(var_sum * log_m)
    else:
        q = (1 / lr_q + 2 * math.sqrt(2) * lr_q) * math.sqrt(
            (adaptive_v0 + var_sum) * log_m
        ) + 4 * math.log2(1 + var_sum / adaptive_v0)
    return 2 * (theta + loss_bound * (q + log_m / q_cap)) / t


#: the grid of Freedman parameters :math:`\lambda_k = 2^{-k}` the high-probability bound
#: minimises over (a union bound over the grid and the groups).
HP_GRID = 60


def fsq_bound_hp(
    t: float,
    delta: float,
    *,
    kappa_sq_sum: float,
    noise_sq_sum: float,
    reg_radius: float,
    radius: float,
    grad_bound: float,
    lr_theta: float,
    loss_bound: float,
    eta_q: float,
    second_moment_sum: float,
    inv_pi_sum: Tensor,
    lag: float = 0.0,
    theta_sq_sum: float | None = None,
) -> float:
    r"""A bound on the optimisation error that holds with probability at least ``1 - delta``.

    ``theta_sq_sum``, when given, is the :math:`K_t` of the :math:`\theta` regret terms (the
    observed :math:`\sum_j\|c_jg_j\|^2/G^2` of ``theta_step="observed"``, docs/math.md, "Observed
    gradient step"); otherwise they use ``kappa_sq_sum``.

    .. math::

        \varepsilon_t \le \frac1t\Big[\frac{R^2\sqrt{K_t+\lambda}}{2c_\theta}
        + c_\theta G^2\sqrt{K_t}
        + D\sqrt{2 N_t\log(4/\delta)} + D\sqrt{2 N_t\log(8/\delta)}
        + B\Big(\frac{\log m}{\eta_t} + A_t + \sqrt{\tfrac12 K_t\log(4/\delta)}
        + \max_i\min_k\big(\lambda_k W_{t,i} + \frac{\log(4mk_{\max}/\delta)}{\lambda_k}\big)
        \Big)\Big]

    with :math:`N_t = G^2\sum_{j\le t}(\kappa_j+1)^2` (``noise_sq_sum``), :math:`A_t =
    \sum_j\eta_j\operatorname{Var}_{q_j}(\hat\ell_j)` (``second_moment_sum``, observed;
    :math:`\operatorname{Var}_q(x) = \langle q, x^2\rangle - \langle q, x\rangle^2`),
    :math:`W_{t,i} = \sum_j 1/\pi_{j,i}` (``inv_pi_sum``), :math:`\lambda_k = 2^{-k}`,
    :math:`k < k_{\max}` = :data:`HP_GRID`, :math:`\eta_t` the last ``q`` step (``eta_q``).
    Derivation: docs/math.md, "High-probability bound". Every term is computable after round ``t``;
    the bound is data-dependent (it uses the realised :math:`A_t, W_t, K_t`), which the
    supermartingale arguments allow.

    Example:
        >>> w = torch.full((3,), 100.0)
        >>> kw = dict(kappa_sq_sum=100.0, noise_sq_sum=400.0, reg_radius=2, radius=1,
        ...           grad_bound=1, lr_theta=1.4, loss_bound=1, eta_q=0.1,
        ...           second_moment_sum=5.0, inv_pi_sum=w)
        >>> fsq_bound_hp(100, 0.01, **kw) > fsq_bound_hp(100, 0.1, **kw)
        True
    """
    _check_t_delta(t, delta)
    m = int(inv_pi_sum.numel())
    theta = theta_regret(
        reg_radius=reg_radius,
        lr_theta=lr_theta,
        grad_bound=grad_bound,
        k_theta=kappa_sq_sum if theta_sq_sum is None else theta_sq_sum,
        lag=lag,
    )
    noise = theta_noise(radius=radius, noise_sq_sum=noise_sq_sum, delta=delta)
    # player 2's per-group underestimation (exponential supermartingale, union over groups and
    # the grid), on top of the terms both high-probability bounds share
    lam = torch.tensor([2.0**-k for k in range(HP_GRID)], dtype=torch.float64)
    log_term = math.log(4 * m * HP_GRID / delta)
    dev = lam[None, :] * inv_pi_sum.to(torch.float64)[:, None] + log_term / lam[None, :]
    q = _hp_player2_common(m, eta_q, second_moment_sum, kappa_sq_sum, delta) + float(
        dev.min(dim=1).values.max()
    )
    return (theta + noise + loss_bound * q) / t


#: the size of the grid :math:`\lambda_k = 2^{-k/4}` (:func:`ix_grid`) of
#: :func:`fsq_bound_hp_ix`: finer than :data:`HP_GRID`'s dyadic one because there the best
#: admissible point is the largest one below :math:`2\gamma_{\min}`, not a free optimum.
HP_GRID_IX = 240


def ix_grid() -> list[float]:
    r"""The grid :math:`\lambda_k = 2^{-k/4}`, :math:`k <` :data:`HP_GRID_IX` (from 1 down)."""
    return [2.0 ** (-k / 4) for k in range(HP_GRID_IX)]


def fsq_bound_hp_ix(
    t: int,
    delta: float,
    n_groups: int,
    *,
    kappa_sq_sum: float,
    noise_sq_sum: float,
    reg_radius: float,
    radius: float,
    grad_bound: float,
    lr_theta: float,
    loss_bound: float,
    eta_q: float,
    second_moment_sum: float,
    bias_sum: float,
    gamma_min: float,
    full_rounds: int,
    lag: float = 0.0,
    theta_sq_sum: float | None = None,
) -> float:
    r"""The high-probability bound of the implicit-exploration variant (``estimator="ix"``).

    ``theta_sq_sum``, when given, is the :math:`K_t` of the :math:`\theta` regret terms (the
    observed :math:`\sum_j\|c_jg_j\|^2/G^2` of ``theta_step="observed"``, docs/math.md, "Observed
    gradient step"); otherwise they use ``kappa_sq_sum``.

    .. math::

        \varepsilon_t \le \frac1t\Big[\frac{R^2\sqrt{K_t+\lambda}}{2c_\theta}
        + c_\theta G^2\sqrt{K_t}
        + D\sqrt{2 N_t\log(4/\delta)} + D\sqrt{2 N_t\log(8/\delta)}
        + B\Big(\frac{\log m}{\eta_t} + A_t + \beta_t + \sqrt{\tfrac12 K_t\log(4/\delta)}
        + \min_{k:\,\lambda_k \le 2\gamma_{\min}}\big(\frac{\lambda_k n_t}{8}
        + \frac{\log(4mk_{\max}/\delta)}{\lambda_k}\big)\Big)\Big]

    with :math:`A_t = \sum_j\frac{\eta_j}{2}\sum_i q_{j,i}\hat c_{j,i}^2`
    (``second_moment_sum``), :math:`\beta_t = \sum_j\gamma_j\sum_i q_{j,i}/(\pi_{j,i}+\gamma_j)`
    (``bias_sum``, a bound on the estimates' total downward bias), :math:`\gamma_{\min}` the
    smallest positive :math:`\gamma_j` so far (``gamma_min``; ``inf`` if none),
    :math:`n_t` the rounds with :math:`\gamma_j = 0` (``full_rounds``, the rounds with
    :math:`r_j = m`), :math:`\lambda_k = 2^{-k/4}`, :math:`k < k_{\max}` = :data:`HP_GRID_IX`; the
    other symbols as in :func:`fsq_bound_hp`. With :math:`\gamma_j = \eta_j/2` every term is
    :math:`O(\sqrt{V_t}\,\log(m/\delta)/\sqrt{\log m})`, :math:`V_t = \sum_j m/r_j`
    (docs/math.md, "Implicit exploration").

    Example:
        >>> kw = dict(kappa_sq_sum=400.0, noise_sq_sum=900.0, reg_radius=2, radius=1,
        ...           grad_bound=1, lr_theta=1.4, loss_bound=1, eta_q=0.05,
        ...           second_moment_sum=20.0, bias_sum=20.0, gamma_min=0.025, full_rounds=0)
        >>> fsq_bound_hp_ix(100, 0.01, 5, **kw) > fsq_bound_hp_ix(100, 0.1, 5, **kw)
        True
    """
    _check_t_delta(t, delta)
    m = int(n_groups)
    log_term = math.log(4 * m * HP_GRID_IX / delta)
    valid = [lam for lam in ix_grid() if lam <= 2 * gamma_min]
    if not valid:
        return math.inf
    theta = theta_regret(
        reg_radius=reg_radius,
        lr_theta=lr_theta,
        grad_bound=grad_bound,
        k_theta=kappa_sq_sum if theta_sq_sum is None else theta_sq_sum,
        lag=lag,
    )
    noise = theta_noise(radius=radius, noise_sq_sum=noise_sq_sum, delta=delta)
    dev = min(lam * full_rounds / 8 + log_term / lam for lam in valid)
    q = _hp_player2_common(m, eta_q, second_moment_sum, kappa_sq_sum, delta) + bias_sum + dev
    return (theta + noise + loss_bound * q) / t
