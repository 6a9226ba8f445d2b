r"""GDRO as a two-player game, with flexible per-round sample sizes, and four baselines.

The problem is :math:`\min_{\theta\in\Theta}\max_{q\in\Delta_m}\ \phi(\theta, q) =
\sum_i q_i R_i(\theta)`, :math:`R_i` the risk on group :math:`i`. Each round :math:`t` the
caller fixes how many groups :math:`r_t \in [1, m]` may be queried; the optimizer picks the set
(:meth:`GroupGame.plan`), the caller draws one sample from each (e.g. with
:class:`~gdro_fsq.data.GroupSampler`) and passes a closure returning the per-sample losses to
:meth:`GroupGame.step`. :meth:`GroupGame.round` does all three.

* :class:`GDROFSQ` (the method): FTRL with proximal quadratic regularisers on
  importance-weighted stochastic gradients for :math:`\theta`; exponential weights (FTRL with
  entropy) on importance-weighted loss estimates for :math:`q`, with the query set drawn from
  :math:`\pi = (1-\gamma_t)a(q_t, r_t) + \gamma_t r_t/m`; anytime step sizes that follow the
  per-round variance of the estimates (:math:`m/r_t` for :math:`q`, :math:`\kappa_t^2` for
  :math:`\theta`); averaged iterates; the running error bound :meth:`GDROFSQ.bound` and the
  high-probability bound :meth:`GDROFSQ.bound_hp`; ``estimator="ix"`` replaces the estimates
  of ``q`` by implicit-exploration cost estimates (:func:`fsq_bound_hp_ix`).
* :class:`OneSampleBandit`: the same game with :math:`r_t = 1` (one sample per round).
* :class:`SMDFullInfo`: stochastic mirror descent with :math:`m` samples per round.
* :class:`SagawaGDRO`: online group DRO (exponentiated gradient on the sampled groups' raw
  losses, constant steps).
* :class:`ERM`: uniform weights, SGD on the average loss.

Example:
    >>> import torch
    >>> from gdro_fsq.data import GroupSampler
    >>> X = torch.randn(30, 2, dtype=torch.float64); y = torch.randn(30, dtype=torch.float64)
    >>> g = torch.arange(30) % 3
    >>> w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    >>> loss = lambda params, b: ((b.X @ params[0] - b.y) ** 2).clamp(max=1.0)
    >>> gen = torch.Generator().manual_seed(0)
    >>> opt = GDROFSQ([w], loss, n_groups=3, lr_theta=0.1, generator=gen)
    >>> losses = opt.round(GroupSampler(X, y, g, generator=gen), r=2)
    >>> losses.shape, round(float(opt.q.sum()), 6)
    (torch.Size([2]), 1.0)
"""

from __future__ import annotations

import abc
import contextlib
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.optim import Optimizer

from shared_core.mirror import get_mirror

from .sampling import (
    check_sample_size,
    inclusion_probabilities,
    max_weight_sum,
    systematic_sample,
    uniform_probabilities,
)

__all__ = [
    "ERM",
    "GDROFSQ",
    "GroupGame",
    "OneSampleBandit",
    "Query",
    "SMDFullInfo",
    "SagawaGDRO",
    "exploration_rate",
    "fsq_bound",
    "fsq_bound_hp",
    "fsq_bound_hp_ix",
    "importance_weighted_losses",
    "ix_cost_estimates",
    "q_step_size",
    "variance_proxy",
]

LossFn = Callable[[Any, Any], Tensor]
THETA_UPDATES = ("ftrl-prox", "ftrl", "sgd")
ESTIMATORS = ("iw", "ix")
#: player 2's per-round variance proxy at :math:`r = m` (:func:`variance_proxy`) and its step
#: cap there (:meth:`GDROFSQ._step_cap`); :class:`SMDFullInfo` with ``q_update="ftrl"`` uses them.
FULL_INFO_VAR = 0.25
FULL_INFO_CAP = 1.0
#: the prior variance :math:`v_0` of the adaptive ``q`` step (``q_step="adaptive"``).
ADAPTIVE_V0 = 1.0
Q_STEPS = ("bound", "adaptive")
#: the rules for the non-increasing ``q`` step cap :math:`\bar\eta_t` of :class:`GDROFSQ`
#: (README, "Round weights"): the cap of the running mean size (rounds below it
#: down-weighted), of the smallest size so far (no down-weighting; the earlier rule), or none.
STEP_CAPS = ("mean", "min", "none")
#: what the :math:`\theta` step's :math:`K_t` of :class:`GDROFSQ` sums: the sure bounds
#: :math:`(c_j\kappa_j)^2` or the observed :math:`\|c_jg_j\|^2/G^2` (README, "Observed
#: gradient step").
THETA_STEPS = ("kappa", "observed")


class Query(NamedTuple):
    """The groups a round queries and their inclusion probabilities."""

    groups: Tensor  #: the chosen group ids, sorted, length ``r``.
    probs: Tensor  #: ``P(i in S)`` for each chosen group.
    r: int  #: the round's sample size.
    pi: Tensor  #: ``P(i in S)`` for every group, shape ``(m,)``.


# --------------------------------------------------------------------------- pure functions


def q_step_size(scale: float, n_groups: int, var_sum: float) -> float:
    r"""The anytime step :math:`\eta_t = c\sqrt{\log m / V_t}`, :math:`V_t = \sum_{j\le t} m/r_j`.

    Example:
        >>> round(q_step_size(1.0, 4, 8.0), 6) == round(math.sqrt(math.log(4) / 8), 6)
        True
    """
    return scale * math.sqrt(math.log(n_groups) / var_sum)


def variance_proxy(n_groups: int, r: int) -> float:
    r"""Player 2's per-round variance proxy :math:`v(r) = m/r - 3/4`.

    A bound on the mean of the centred second moment :math:`\sum_i q_i(\hat\ell_i - 1/2)^2`
    of the importance-weighted gains :math:`\hat\ell_i = \ell_i\mathbb 1[i\in S]/\pi_i`,
    :math:`\ell \in [0, 1]^m`: its mean is :math:`\sum_i q_i\ell_i(\ell_i/\pi_i - 1) + 1/4
    \le \sum_i q_i/\pi_i - 3/4 \le m/r - 3/4` (README, "The centred second moment"). At
    :math:`r = m` it is :math:`1/4` (:data:`FULL_INFO_VAR`), a quarter of the uncentred
    :math:`m/r`.

    Example:
        >>> variance_proxy(10, 10), variance_proxy(10, 2)
        (0.25, 4.25)
    """
    return n_groups / r - 0.75


def exploration_rate(eta: float, n_groups: int, r: int) -> float:
    r"""The exploration rate :math:`\gamma_t = \min(1/2,\ \eta_t m / r_t)`.

    It keeps every estimate bounded: :math:`\pi_{t,i} \ge \gamma_t r_t/m = \eta_t`, so
    :math:`\eta_t \hat\ell_{t,i} \le 1` (:class:`GDROFSQ` caps :math:`\eta_t \le r_t/(2m)`,
    so the minimum with 1/2 is not needed there), and it vanishes like
    :math:`\sqrt{m\log m/(r t)}`. With :math:`r_t = m` it has no effect (every group is
    queried).
    """
    return min(0.5, eta * n_groups / r)


def importance_weighted_losses(values: Tensor, groups: Tensor, probs: Tensor, m: int) -> Tensor:
    r""":math:`\hat v_i = v_i\,\mathbb 1[i \in S] / \pi_i`: unbiased for the full vector.

    Args:
        values: one value per queried group, shape ``(r,)``.
        groups: the queried groups, shape ``(r,)``, distinct.
        probs: their inclusion probabilities :math:`\pi_i`, shape ``(r,)``.
        m: the number of groups.

    Returns:
        The estimate, shape ``(m,)``, zero off ``S``.

    Example:
        >>> v, S, p = torch.tensor([0.5]), torch.tensor([2]), torch.tensor([0.25])
        >>> importance_weighted_losses(v, S, p, 3)
        tensor([0., 0., 2.])
    """
    out = torch.zeros(m, dtype=values.dtype, device=values.device)
    out[groups] = values / probs.to(values)
    return out


def ix_cost_estimates(
    scaled: Tensor, groups: Tensor, probs: Tensor, m: int, gamma: float
) -> Tensor:
    r"""Implicit-exploration cost estimates :math:`\hat c_i = (1 - \ell_i/B)\mathbb 1[i\in S]
    /(\pi_i + \gamma)`.

    Their mean is :math:`c_i\pi_i/(\pi_i + \gamma) \le c_i`: they underestimate the costs
    (optimistic for the player who minimises them), which is what gives the high-probability
    bound :func:`fsq_bound_hp_ix` its :math:`\sqrt t` rate (README, "Implicit exploration").

    Args:
        scaled: the queried groups' losses divided by the loss bound, in ``[0, 1]``, shape ``(r,)``.
        groups: the queried groups, shape ``(r,)``, distinct.
        probs: their inclusion probabilities, shape ``(r,)``.
        m: the number of groups.
        gamma: the implicit-exploration parameter :math:`\gamma \ge 0` (0: unbiased).

    Example:
        >>> ix_cost_estimates(torch.tensor([0.25]), torch.tensor([1]), torch.tensor([0.5]), 3, 0.25)
        tensor([0., 1., 0.])
    """
    out = torch.zeros(m, dtype=scaled.dtype, device=scaled.device)
    out[groups] = (1 - scaled) / (probs.to(scaled) + gamma)
    return out


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
    r"""The optimization-error bound tracked by :class:`GDROFSQ` after ``t`` rounds.

    ``theta_sq_sum``, when given, is the :math:`K_t` of the :math:`\theta` regret terms (the
    observed :math:`\sum_j\|c_jg_j\|^2/G^2` of ``theta_step="observed"``, README, "Observed
    gradient step"); otherwise they use ``kappa_sq_sum``.

    .. math::

        \varepsilon_t \le \frac{2}{t}\Big[\frac{R^2\sqrt{K_t + \lambda}}{2c_\theta}
        + c_\theta G^2\sqrt{K_t} + B\Big(\big(\tfrac{1}{c_q} + 2c_q\big)\sqrt{V_t\log m}
        + \frac{\log m}{\bar\eta}\Big)\Big],
        \qquad V_t = \sum_{j\le t} v(r_j),\quad K_t = \sum_{j\le t}\kappa_j^2,

    (``t``: the number of rounds, or :math:`C_t = \sum_j c_j` with round weights, README,
    "Round weights"), with :math:`R` the range of the :math:`\theta` regulariser
    (``reg_radius``: :math:`2D` for
    the proximal FTRL and SGD, :math:`D + \|\theta_1\|` for FTRL anchored at
    :math:`\theta_1`), :math:`G` the per-sample gradient bound, :math:`B` the loss bound,
    :math:`\kappa_j \le 2/(1-\gamma_j)` the bound on the round's importance-weight sum
    (:math:`\kappa = 1` at :math:`r = m`), :math:`\lambda` the look-ahead term of the anchored
    FTRL (``lag``; 0 otherwise), :math:`\eta^\theta = c_\theta/\sqrt{K}` and
    :math:`\eta^q_t = \min(c_q\sqrt{\log m/V_t}, \bar\eta)`, :math:`\bar\eta` (``q_cap``) the
    smallest step cap of the rounds so far, :math:`v(r) = m/r - 3/4`
    (:func:`variance_proxy`; ``var_sum`` is :math:`V_t`) (README, "The math"). Since
    :math:`1 \le \kappa_j \le 4` and :math:`m/(4r_j) \le v(r_j) \le m/r_j` it is
    :math:`O(\frac1t\sqrt{\sum_j (m/r_j)\log m})`. With ``adaptive_v0`` (the adaptive step
    :math:`\eta_t = \min(c_q\sqrt{\log m/(v_0 + X_{t-1})}, \bar\eta_t)` on the observed
    variances :math:`X`) the ``q`` part is :math:`B\big((\tfrac1{c_q} + 2\sqrt2 c_q)
    \sqrt{(v_0 + V_t)\log m} + 4\log_2(1 + V_t/v_0) + \log m/\bar\eta\big)` (README,
    "Adaptive q step").

    Example:
        >>> kw = dict(kappa_sq_sum=100.0, reg_radius=2, grad_bound=1, lr_theta=1.4, lr_q=1.0)
        >>> fsq_bound(100, 100 * 10.0, 10, **kw) > fsq_bound(100, 100 * 1.0, 10, **kw)
        True
    """
    if not t > 0:
        raise ValueError(f"the bound needs t > 0, got {t}")
    k_theta = kappa_sq_sum if theta_sq_sum is None else theta_sq_sum
    theta = reg_radius**2 * math.sqrt(k_theta + lag) / (
        2 * lr_theta
    ) + lr_theta * grad_bound**2 * math.sqrt(k_theta)
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
    observed :math:`\sum_j\|c_jg_j\|^2/G^2` of ``theta_step="observed"``, README, "Observed
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
    Derivation: README, "High-probability bound". Every term is computable after round ``t``;
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
    if not t > 0:
        raise ValueError(f"the bound needs t > 0, got {t}")
    if not (0 < delta < 1):
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    m = int(inv_pi_sum.numel())
    k_theta = kappa_sq_sum if theta_sq_sum is None else theta_sq_sum
    theta = reg_radius**2 * math.sqrt(k_theta + lag) / (
        2 * lr_theta
    ) + lr_theta * grad_bound**2 * math.sqrt(k_theta)
    # player 1's noise: a scalar Azuma term and the norm of a Hilbert-space martingale (Pinelis)
    noise = (
        radius
        * math.sqrt(2 * noise_sq_sum)
        * (math.sqrt(math.log(4 / delta)) + math.sqrt(math.log(8 / delta)))
    )
    # player 2: regret on the estimates (observed), the played-mixture martingale (Azuma), and
    # the per-group underestimation (exponential supermartingale, union over groups and grid)
    lam = torch.tensor([2.0**-k for k in range(HP_GRID)], dtype=torch.float64)
    log_term = math.log(4 * m * HP_GRID / delta)
    dev = lam[None, :] * inv_pi_sum.to(torch.float64)[:, None] + log_term / lam[None, :]
    q = (
        math.log(m) / eta_q
        + second_moment_sum
        + math.sqrt(0.5 * kappa_sq_sum * math.log(4 / delta))
        + float(dev.min(dim=1).values.max())
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
    observed :math:`\sum_j\|c_jg_j\|^2/G^2` of ``theta_step="observed"``, README, "Observed
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
    (README, "Implicit exploration").

    Example:
        >>> kw = dict(kappa_sq_sum=400.0, noise_sq_sum=900.0, reg_radius=2, radius=1,
        ...           grad_bound=1, lr_theta=1.4, loss_bound=1, eta_q=0.05,
        ...           second_moment_sum=20.0, bias_sum=20.0, gamma_min=0.025, full_rounds=0)
        >>> fsq_bound_hp_ix(100, 0.01, 5, **kw) > fsq_bound_hp_ix(100, 0.1, 5, **kw)
        True
    """
    if not t > 0:
        raise ValueError(f"the bound needs t > 0, got {t}")
    if not (0 < delta < 1):
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    m = int(n_groups)
    k_theta = kappa_sq_sum if theta_sq_sum is None else theta_sq_sum
    theta = reg_radius**2 * math.sqrt(k_theta + lag) / (
        2 * lr_theta
    ) + lr_theta * grad_bound**2 * math.sqrt(k_theta)
    noise = (
        radius
        * math.sqrt(2 * noise_sq_sum)
        * (math.sqrt(math.log(4 / delta)) + math.sqrt(math.log(8 / delta)))
    )
    log_term = math.log(4 * m * HP_GRID_IX / delta)
    valid = [lam for lam in ix_grid() if lam <= 2 * gamma_min]
    if not valid:
        return math.inf
    dev = min(lam * full_rounds / 8 + log_term / lam for lam in valid)
    q = (
        math.log(m) / eta_q
        + second_moment_sum
        + bias_sum
        + math.sqrt(0.5 * kappa_sq_sum * math.log(4 / delta))
        + dev
    )
    return (theta + noise + loss_bound * q) / t


def _positive(name: str, value: Any, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and value > 0)
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


# --------------------------------------------------------------------------- the game


class GroupGame(Optimizer, abc.ABC):
    r"""Common machinery: query planning, loss checks, the :math:`\theta` player and averaging.

    Args:
        params: the model parameters (or parameter groups).
        loss_fn: ``loss_fn(model_or_params, batch) -> Tensor`` of per-sample losses, one per
            queried group, in ``[0, loss_bound]``, differentiable in the parameters.
        n_groups: the number of groups ``m >= 2``.
        lr_theta: :math:`c_\theta`; the step is :math:`c_\theta/\sqrt{K_t}` (``theta_decay``),
            :math:`K_t = \sum_{j\le t}\kappa_j^2` with :math:`\kappa_j` the round's bound on the
            weight sum (:meth:`_kappa`; 1 for the baselines, so :math:`K_t = t`), or constant.
        model: what ``loss_fn`` receives first (default: the list of parameters).
        loss_bound: :math:`B`; losses outside ``[0, B]`` are refused.
        radius: :math:`D`: :math:`\Theta = \{\|\theta\|_2 \le D\}` over all parameters jointly
            (default: unconstrained).
        theta_update: ``"ftrl-prox"`` (FTRL with quadratic regularisers centred at the
            iterates, added as the step shrinks), ``"ftrl"`` (FTRL with one regulariser
            anchored at :math:`\theta_1`: lazy projection of the summed gradients) or ``"sgd"``
            (projected online gradient descent).
        theta_decay: the :math:`1/\sqrt t` decay of the :math:`\theta` step.
        generator: the random source for the query sets.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        loss_fn: LossFn,
        n_groups: int,
        lr_theta: float,
        *,
        model: Any = None,
        loss_bound: float = 1.0,
        radius: float | None = None,
        theta_update: str = "sgd",
        theta_decay: bool = True,
        generator: torch.Generator | None = None,
    ) -> None:
        if not callable(loss_fn):
            raise ValueError(f"loss_fn must be callable, got {loss_fn!r}")
        if isinstance(n_groups, bool) or not isinstance(n_groups, int) or n_groups < 2:
            raise ValueError(f"n_groups must be an integer >= 2, got {n_groups!r}")
        if theta_update not in THETA_UPDATES:
            raise ValueError(f"theta_update must be one of {THETA_UPDATES}, got {theta_update!r}")
        defaults = {"lr_theta": _positive("lr_theta", lr_theta)}
        super().__init__(params, defaults)
        for group in self.param_groups:
            group["lr_theta"] = _positive("lr_theta", group["lr_theta"])
        self.loss_fn = loss_fn
        self.n_groups = n_groups
        self.model = model
        self.loss_bound = _positive("loss_bound", loss_bound)
        self.radius = _positive("radius", radius, allow_none=True)
        self.theta_update = theta_update
        self.theta_decay = bool(theta_decay)
        #: what the theta step's :math:`K_t` sums: ``"kappa"`` (the sure bounds
        #: :math:`\kappa_j^2`) or ``"observed"`` (:class:`GDROFSQ` option, README, "Observed
        #: gradient step").
        self.theta_step = "kappa"
        self.generator = generator
        self._query: Query | None = None
        self.game: dict[str, Any] = {
            "t": 0,
            "samples": 0,
            "var_sum": 0.0,
            "q": torch.full((n_groups,), 1.0 / n_groups, dtype=torch.float64),
            "q_sum": torch.zeros(n_groups, dtype=torch.float64),
            "kappa_sq_sum": 0.0,
            # K_t of the theta step: sum_j kappa_j^2 (theta_step="kappa") or the observed
            # sum_j |c_j g_j|^2 / G^2 (theta_step="observed", GDROFSQ only)
            "theta_sq_sum": 0.0,
            # round weights c_t (1 except where GDROFSQ down-weights a small round) and C_t
            "round_weight": 1.0,
            "weight_sum": 0.0,
        }
        if self.radius is not None:
            self._project_(self._params())

    # -- bookkeeping
    def _params(self) -> list[Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    @property
    def t(self) -> int:
        """Rounds completed."""
        return int(self.game["t"])

    @property
    def samples(self) -> int:
        """Samples queried so far, :math:`\\sum_j r_j`."""
        return int(self.game["samples"])

    @property
    def q(self) -> Tensor:
        """The group weights of the latest planned (or last played) round."""
        return self.game["q"].clone()

    @property
    def weight_sum(self) -> float:
        r""":math:`C_t = \sum_{j\le t} c_j`, the summed round weights (``t`` when every
        :math:`c_j = 1`)."""
        return float(self.game.get("weight_sum", self.t))

    def _round_weight(self) -> float:
        r"""The weight :math:`c_t \in (0, 1]` of the planned round (set by ``_inclusion``)."""
        return float(self.game.get("round_weight", 1.0))

    def averaged_q(self) -> Tensor:
        r""":math:`\bar q_t = \sum_{j\le t} c_j q_j / C_t` (uniform before the first round;
        :math:`c_j = 1` except for :class:`GDROFSQ`'s down-weighted rounds)."""
        if self.t == 0:
            return self.q
        return self.game["q_sum"] / self.weight_sum

    def averaged_params(self) -> list[Tensor]:
        r""":math:`\bar\theta_t = \sum_{j\le t} c_j\theta_j / C_t`, one tensor per parameter."""
        out = []
        for p in self._params():
            avg = self.state[p].get("avg") if p in self.state else None
            out.append((avg if avg is not None else p).detach().clone())
        return out

    @contextlib.contextmanager
    def swap_average(self) -> Iterator[None]:
        """Within the block the parameters hold their averages; the iterates come back after."""
        params = self._params()
        saved = [p.detach().clone() for p in params]
        with torch.no_grad():
            for p, a in zip(params, self.averaged_params(), strict=True):
                p.copy_(a)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, s in zip(params, saved, strict=True):
                    p.copy_(s)

    def state_dict(self) -> dict[str, Any]:
        """The torch.optim state plus the game's (weights, counters, generator state)."""
        sd = super().state_dict()
        sd["game"] = {k: (v.clone() if isinstance(v, Tensor) else v) for k, v in self.game.items()}
        if self.generator is not None:
            sd["game"]["generator_state"] = self.generator.get_state()
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (any pending plan is dropped)."""
        sd = dict(state_dict)
        game = dict(sd.pop("game"))
        gen_state = game.pop("generator_state", None)
        super().load_state_dict(sd)
        self.game = {k: (v.clone() if isinstance(v, Tensor) else v) for k, v in game.items()}
        if gen_state is not None and self.generator is not None:
            self.generator.set_state(gen_state)
        self._query = None

    # -- the round
    def _check_r(self, r: int) -> int:
        return check_sample_size(r, self.n_groups)

    @abc.abstractmethod
    def _inclusion(self, r: int, t: int) -> Tensor:
        """Set ``game['q']`` to :math:`q_t` and return the marginals :math:`\\pi_t`, shape (m,)."""

    @abc.abstractmethod
    def _theta_weights(self, query: Query) -> Tensor:
        """Weights ``w`` (shape (r,)) such that ``sum_k w_k loss_k`` estimates the objective."""

    def _kappa(self, query: Query) -> float:
        """A bound on the sum of the round's gradient weights (the baselines' is 1)."""
        return 1.0

    #: a bound on :math:`\kappa_t^2` valid for every future round (the anchored FTRL's
    #: look-ahead term).
    kappa_bound_sq = 1.0

    @abc.abstractmethod
    def _update_q(self, scaled: Tensor, query: Query, t: int) -> None:
        """Update player 2 from the losses divided by the loss bound (shape (r,))."""

    def plan(self, r: int) -> Query:
        """Choose this round's groups: ``r`` distinct ids with their inclusion probabilities."""
        r = self._check_r(r)
        t = self.t + 1
        pi = self._inclusion(r, t)
        groups = systematic_sample(pi, self.generator)
        self._query = Query(groups, pi[groups], r, pi)
        return self._query

    def _check_losses(self, losses: Any, r: int) -> Tensor:
        if not isinstance(losses, Tensor):
            raise ValueError(f"the closure must return a tensor of losses, got {type(losses)!r}")
        if losses.shape != (r,):
            raise ValueError(
                f"the closure must return one loss per queried group, shape ({r},); got "
                f"{tuple(losses.shape)}"
            )
        if not bool(torch.isfinite(losses).all()):
            raise ValueError(f"non-finite losses: {losses.detach().tolist()}")
        lo, hi = float(losses.detach().min()), float(losses.detach().max())
        tol = 1e-9 * self.loss_bound
        if lo < -tol or hi > self.loss_bound + tol:
            raise ValueError(
                f"losses must lie in [0, loss_bound={self.loss_bound}], got range [{lo}, {hi}]"
            )
        return losses

    def _theta_lr(self, group: dict[str, Any], k: float) -> float:
        """The step :math:`c_\\theta/\\sqrt K` (or :math:`c_\\theta` without decay)."""
        c = group["lr_theta"]
        return c / math.sqrt(k) if self.theta_decay else c

    def _project_(self, params: list[Tensor]) -> None:
        if self.radius is None:
            return
        with torch.no_grad():
            nrm = math.sqrt(sum(float((p.detach() ** 2).sum()) for p in params))
            if nrm > self.radius:
                for p in params:
                    p.mul_(self.radius / nrm)

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor:  # type: ignore[override]
        """Play the planned round: evaluate the losses, update both players, return the losses.

        Args:
            closure: returns the per-sample losses of the samples drawn for the groups of the
                last :meth:`plan` (in the order of ``query.groups``), with autograd enabled.

        Returns:
            The detached losses, shape ``(r,)``.
        """
        if closure is None:
            raise ValueError("step needs a closure returning the per-sample losses")
        query = self._query
        if query is None:
            raise ValueError("call plan(r) before step(closure): no round is planned")
        c = self._round_weight()
        with torch.enable_grad():
            losses = self._check_losses(closure(), query.r)
            params = [p for p in self._params() if p.requires_grad]
            # the game's state is float64 on the CPU; the losses live with the model
            weights = c * self._theta_weights(query).to(losses)
            objective = (weights * losses).sum()
            grads = torch.autograd.grad(objective, params, allow_unused=True)
        t = self.t + 1
        kappa = c * self._kappa(query)  # the weighted gradient c_t g_t has norm <= c_t kappa_t G
        self.game["kappa_sq_sum"] = float(self.game["kappa_sq_sum"]) + kappa**2
        k_prev = float(self.game["theta_sq_sum"])
        if self.theta_step == "observed":  # |c_t g_t|^2 / G^2 <= (c_t kappa_t)^2
            sq = sum(float((g.detach() ** 2).sum()) for g in grads if g is not None)
            self.game["theta_sq_sum"] = k_prev + sq / float(self.grad_bound) ** 2  # type: ignore[attr-defined]
        else:
            self.game["theta_sq_sum"] = k_prev + kappa**2
        self.game["weight_sum"] = self.weight_sum + c
        self._update_theta(dict(zip(map(id, params), grads, strict=True)), t, k_prev)
        self.game["q_sum"] = self.game["q_sum"] + c * self.game["q"]
        self._update_q(losses.detach().to("cpu", torch.float64) / self.loss_bound, query, t)
        self.game["t"] = t
        self.game["samples"] += query.r
        self._query = None
        return losses.detach()

    def _update_theta(self, grads: dict[int, Tensor | None], t: int, k_prev: float) -> None:
        r"""Move the parameters from :math:`\theta_t` to :math:`\theta_{t+1}`.

        With :math:`K = K_t` (this round included) and :math:`\eta = c_\theta/\sqrt K`:

        * ``sgd``: :math:`\theta_{t+1} = \Pi(\theta_t - \eta g_t)`;
        * ``ftrl``: :math:`\theta_{t+1} = \Pi(\theta_1 - \eta' \sum_{j\le t} g_j)`,
          :math:`\eta' = c_\theta/\sqrt{K + \lambda}` (:attr:`kappa_bound_sq` =
          :math:`\lambda` bounds the next round's :math:`\kappa^2`, so the step that
          produced :math:`\theta_{t+1}` is no larger than the next gradient allows);
        * ``ftrl-prox``: the regulariser is :math:`\sum_{j\le t}\frac{\sigma_j}{2}
          \|\theta - \theta_j\|^2` with :math:`\sigma_{1:t} = 1/\eta`, so
          :math:`\theta_{t+1} = \Pi(\bar z_t - \eta\sum_{j\le t} g_j)`,
          :math:`\bar z_t = \eta\sum_{j\le t}\sigma_j\theta_j`.
        """
        k = float(self.game["theta_sq_sum"])
        for group in self.param_groups:
            c = group["lr_theta"]

            def sigma_total(kk: float, c: float = c) -> float:
                if kk <= 0:
                    return 0.0
                return math.sqrt(kk) / c if self.theta_decay else 1.0 / c

            sigma = sigma_total(k) - sigma_total(k_prev)
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["avg"] = torch.zeros_like(p)
                    if self.theta_update == "ftrl":
                        state["anchor"] = p.detach().clone()
                    if self.theta_update != "sgd":
                        state["grad_sum"] = torch.zeros_like(p)
                    if self.theta_update == "ftrl-prox":
                        state["center_sum"] = torch.zeros_like(p)
                # weighted average: c_t / C_t (1/t when every weight is 1)
                alpha = self._round_weight() / self.game["weight_sum"]
                state["avg"].add_(p.detach() - state["avg"], alpha=alpha)
                g = grads.get(id(p))
                if g is None:
                    g = torch.zeros_like(p)
                if self.theta_update == "sgd":
                    if k > 0:  # K = 0 only with zero gradients so far (theta_step="observed")
                        p.sub_(g, alpha=self._theta_lr(group, k))
                elif self.theta_update == "ftrl":
                    state["grad_sum"].add_(g)
                    eta = self._theta_lr(group, k + self.kappa_bound_sq)
                    p.copy_(state["anchor"] - eta * state["grad_sum"])
                else:
                    state["grad_sum"].add_(g)
                    state["center_sum"].add_(p.detach(), alpha=sigma)
                    total = sigma_total(k)
                    if total > 0:  # no regulariser yet: zero gradients so far, theta stays
                        p.copy_(state["center_sum"] / total - state["grad_sum"] / total)
        self._project_(self._params())

    def round(self, sampler: Any, r: int) -> Tensor:
        """``plan(r)``, draw one sample per chosen group from ``sampler``, ``step``."""
        query = self.plan(r)
        batch = sampler.sample(query.groups)
        target = self.model if self.model is not None else self._params()
        return self.step(lambda: self.loss_fn(target, batch))


class GDROFSQ(GroupGame):
    r"""Anytime GDRO with flexible sample queries (the method).

    Round :math:`t` with budget :math:`r_t`:

    1. :math:`\eta_t = \min(c_q\sqrt{\log m/(v_0 + X_{t-1})}, \bar\eta_t)` with
       :math:`X_t = \sum_{j\le t}\operatorname{Var}_{q_j}(\hat\ell_j)` the observed
       variances (``q_step="adaptive"``, the default; :data:`ADAPTIVE_V0` = :math:`v_0`), or
       :math:`\eta_t = \min(c_q\sqrt{\log m/V_t}, \bar\eta_t)`,
       :math:`V_t = V_{t-1} + v(r_t)`, :math:`v(r) = m/r - 3/4` (``q_step="bound"``,
       :func:`variance_proxy`); :math:`\bar\eta_t = \min_{j\le t} \rho(\bar r_j)`,
       :math:`\bar r_j` the running mean size (``step_cap``),
       :math:`\rho(r) = r/(2m)` for :math:`r < m` and 1 for :math:`r = m`;
       :math:`q_t = \operatorname{softmax}(\eta_t \hat L_{t-1})`; the round weight
       :math:`c_t = \min(1, \rho(r_t)/\eta_t)` (1 for a constant :math:`r`),
       :math:`\gamma_t = c_t\eta_t m/r_t \le 1/2` (so :math:`\pi_{t,i} \ge c_t\eta_t` and
       :math:`\eta_t c_t\hat\ell_{t,i} \le 1`); the round's estimates and gradient are
       multiplied by :math:`c_t` and the averages weighted by it (README, "Round weights");
    2. query :math:`S_t`, :math:`|S_t| = r_t`, with marginals
       :math:`\pi_t = (1-\gamma_t)a(q_t, r_t) + \gamma_t r_t/m`;
    3. :math:`\theta`: stochastic gradient :math:`g_t = \sum_{i\in S_t} (q_{t,i}/\pi_{t,i})
       \nabla\ell(\theta_t; z_{t,i})`, :math:`\|g_t\| \le \kappa_t G` with
       :math:`\kappa_t` the sum of the :math:`r_t` largest :math:`q_{t,i}/\pi_{t,i}`;
       :math:`K_t = K_{t-1} + \kappa_t^2`, :math:`\eta^\theta = c_\theta/\sqrt{K_t}`; proximal
       FTRL :math:`\theta_{t+1} = \Pi_\Theta(\bar z_t - \eta^\theta\sum_{j\le t} g_j)`,
       :math:`\bar z_t` the :math:`\sigma`-weighted mean of :math:`\theta_1..\theta_t`
       (:meth:`GroupGame._update_theta`);
    4. :math:`q`: :math:`\hat L_t = \hat L_{t-1} + \hat\ell_t`,
       :math:`\hat\ell_{t,i} = (\ell_{t,i}/B)\mathbb 1[i\in S_t]/\pi_{t,i}` (the losses are
       the max player's gains).

    Args:
        params, loss_fn, n_groups, model, loss_bound, radius, generator: as in
            :class:`GroupGame`.
        lr_theta: :math:`c_\theta` (default, when ``radius`` and ``grad_bound`` are given:
            :math:`R/(\sqrt2 G)`, the minimiser of the bound, with :math:`R = 2D` for
            ``ftrl-prox`` and ``sgd`` and :math:`R = D + \|\theta_1\|` for ``ftrl``).
        lr_q: :math:`c_q` (default 1; the bound's minimiser is :math:`1/\sqrt2` for
            ``q_step="bound"`` and :math:`2^{-3/4}` for ``"adaptive"``).
        q_step: ``"adaptive"`` (default: self-confident tuning on the observed variances,
            the worst-case rate with a data-dependent constant) or ``"bound"`` (the
            worst-case schedule :math:`V_t`). ``estimator="ix"`` always uses the worst-case
            schedule with :math:`m/r` (its analysis needs it). README, "Adaptive q step".
        grad_bound: :math:`G`, a bound on the per-sample gradient norm; with ``radius`` it
            enables :meth:`bound`.
        theta_update: ``"ftrl-prox"`` (default), ``"ftrl"`` or ``"sgd"`` (see
            :class:`GroupGame`).
        explore: use the adaptive exploration :math:`\gamma_t` and the step cap (``False``:
            :math:`\gamma = 0`, no cap; the estimates are then unbounded and :meth:`bound` is
            refused). Only for ``estimator="iw"``.
        estimator: player 2's estimates. ``"iw"`` (default): the importance-weighted gains
            above, with the explicit exploration. ``"ix"``: implicit exploration on the costs
            :math:`c = 1 - \ell/B`: no explicit exploration (:math:`\pi_t = a(q_t, r_t)`),
            no step cap, :math:`q_t = \operatorname{softmax}(-\eta_t\hat C_{t-1})` with
            :math:`\hat c_{t,i} = c_{t,i}\mathbb 1[i\in S_t]/(\pi_{t,i} + \gamma_t)`,
            :math:`\gamma_t = \eta_t/2` for :math:`r_t < m` and 0 for :math:`r_t = m`;
            its :meth:`bound_hp` (:func:`fsq_bound_hp_ix`) has the :math:`\sqrt t` rate for
            every :math:`r` (README, "Implicit exploration").
        theta_step: what the :math:`\theta` step :math:`c_\theta/\sqrt{K_t}` sums in
            :math:`K_t`: ``"kappa"`` (default) the sure bounds :math:`(c_j\kappa_j)^2`;
            ``"observed"`` the realised :math:`\|c_jg_j\|^2/G^2` (AdaGrad-norm proximal
            FTRL: the step follows the gradient's actual size, so an :math:`r`-sample
            gradient's smaller variance buys a larger step; needs ``grad_bound``; the same
            regret bound with the observed :math:`K_t`; README, "Observed gradient step").
        q_bonus: :math:`b \ge 0` (default 0: off), an experimental Exp3.P-style optimistic
            bonus for player 2: the gain estimates become :math:`c_t(\hat\ell_{t,i} +
            \beta_t/\pi_{t,i})` for every group, :math:`\beta_t = b\,\eta_t`, with the round
            weight and exploration computed for :math:`\eta_t(1 + \beta_t)` so that
            :math:`c_t\eta_t(\hat\ell + \beta_t/\pi) \le 1` still holds. Only with
            ``estimator="iw"`` and ``explore=True``; :meth:`bound` and :meth:`bound_hp` are
            refused (not derived; README, "Optimistic bonus").
        step_cap: the non-increasing cap :math:`\bar\eta_t` on the ``q`` step (README,
            "Round weights"): ``"mean"`` (default) :math:`\min_{j\le t}\rho(\bar r_j)`,
            :math:`\bar r_j` the running mean size; ``"min"`` :math:`\min_{j\le t}\rho(r_j)`
            (the earlier rule: one small round caps the step for good); ``"none"``: no cap
            beyond :math:`\eta \le 1`. A round with :math:`\rho(r_t) < \eta_t` gets the weight
            :math:`c_t = \rho(r_t)/\eta_t` (its gains, its gradient and its share of the
            averages), which keeps :math:`c_t\eta_t\hat\ell \le 1`; with ``"min"`` every
            :math:`c_t = 1`.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        loss_fn: LossFn,
        n_groups: int,
        lr_theta: float | None = None,
        *,
        lr_q: float = 1.0,
        grad_bound: float | None = None,
        radius: float | None = None,
        loss_bound: float = 1.0,
        model: Any = None,
        theta_update: str = "ftrl-prox",
        explore: bool = True,
        estimator: str = "iw",
        q_step: str = "adaptive",
        step_cap: str = "mean",
        theta_step: str = "kappa",
        q_bonus: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> None:
        if not (isinstance(q_bonus, int | float) and math.isfinite(q_bonus) and q_bonus >= 0):
            raise ValueError(f"q_bonus must be a finite number >= 0, got {q_bonus!r}")
        if q_bonus > 0 and (estimator != "iw" or not explore):
            raise ValueError("q_bonus needs estimator='iw' with explore=True")
        if theta_step not in THETA_STEPS:
            raise ValueError(f"theta_step must be one of {THETA_STEPS}, got {theta_step!r}")
        if theta_step == "observed" and grad_bound is None:
            raise ValueError('theta_step="observed" needs grad_bound (K_t is in units of G^2)')
        if step_cap not in STEP_CAPS:
            raise ValueError(f"step_cap must be one of {STEP_CAPS}, got {step_cap!r}")
        self.step_cap = step_cap
        if estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
        if q_step not in Q_STEPS:
            raise ValueError(f"q_step must be one of {Q_STEPS}, got {q_step!r}")
        if estimator == "ix":
            q_step = "bound"  # the ix analysis uses the worst-case proxy m/r
        self.estimator = estimator
        self.q_step = q_step
        self.grad_bound = _positive("grad_bound", grad_bound, allow_none=True)
        default_lr = lr_theta is None
        if default_lr and (radius is None or grad_bound is None):
            raise ValueError("lr_theta is needed unless both radius and grad_bound are given")
        super().__init__(
            params,
            loss_fn,
            n_groups,
            1.0 if default_lr else lr_theta,
            model=model,
            loss_bound=loss_bound,
            radius=radius,
            theta_update=theta_update,
            theta_decay=True,
            generator=generator,
        )
        self.theta_step = theta_step
        self.q_bonus = float(q_bonus)
        self.lr_q = _positive("lr_q", lr_q)
        self.explore = bool(explore) and estimator == "iw"
        # kappa <= 2 / (1 - gamma) with gamma <= 1/2 (README, "Why the variance is m/r")
        self.kappa_bound_sq = 16.0 if self.explore else 4.0
        self.reg_radius: float | None = None
        if self.radius is not None:
            if theta_update == "ftrl":  # the regulariser is anchored at theta_1
                start = math.sqrt(sum(float((p.detach() ** 2).sum()) for p in self._params()))
                self.reg_radius = self.radius + start
            else:  # ||theta - theta_j|| <= 2D for every iterate theta_j
                self.reg_radius = 2 * self.radius
        if default_lr:
            assert self.reg_radius is not None and self.grad_bound is not None
            for group in self.param_groups:
                group["lr_theta"] = self.reg_radius / (math.sqrt(2) * self.grad_bound)
        self.game["est_sum"] = torch.zeros(n_groups, dtype=torch.float64)
        # for the high-probability bound (fsq_bound_hp)
        self.game["second_moment_sum"] = 0.0
        self.game["var_obs"] = 0.0  # X_t: the observed q-variances of the estimates
        self.game["inv_pi_sum"] = torch.zeros(n_groups, dtype=torch.float64)
        self.game["noise_sq_sum"] = 0.0
        self.game["eta_cap"] = 1.0
        self.game["eta_q"] = math.nan
        self.game["gamma"] = math.nan
        self.game["bonus"] = 0.0  # beta_t of q_bonus (README, "Optimistic bonus")
        # for the implicit-exploration variant (fsq_bound_hp_ix)
        self.game["bias_sum"] = 0.0
        self.game["gamma_min"] = math.inf
        self.game["full_rounds"] = 0

    def _step_cap(self, r: float) -> float:
        """The largest :math:`\\eta` a round of size ``r`` allows: ``r/(2m)`` (so that
        :math:`\\gamma \\le 1/2`), or 1 when ``r = m`` (every estimate is then at most 1).
        Also used at the running mean size :math:`\\bar r_t` (not an integer in general)."""
        return FULL_INFO_CAP if r >= self.n_groups else r / (2 * self.n_groups)

    def _history_cap(self, r: int) -> float:
        r"""The step cap :math:`\bar\eta_t = \min_{j\le t}\rho(\bar r_j)` of round ``t``,
        :math:`\bar r_j = \frac1j\sum_{i\le j} r_i` the running mean size (this round's ``r``
        included): non-increasing in ``t``, :math:`\rho(r)` for a constant ``r``, and not
        pulled down for good by one small round (README, "Round weights")."""
        if self.step_cap == "none":
            return FULL_INFO_CAP
        if self.step_cap == "min":
            return min(self.game["eta_cap"], self._step_cap(r))
        mean_r = (self.samples + r) / (self.t + 1)
        return min(self.game["eta_cap"], self._step_cap(mean_r))

    def _inclusion(self, r: int, t: int) -> Tensor:
        m = self.n_groups
        if self.estimator == "ix":
            eta = q_step_size(self.lr_q, m, self.game["var_sum"] + m / r)
        elif self.q_step == "adaptive":
            eta = q_step_size(self.lr_q, m, ADAPTIVE_V0 + self.game["var_obs"])
        else:
            eta = q_step_size(self.lr_q, m, self.game["var_sum"] + variance_proxy(m, r))
        if self.estimator == "ix":  # costs, no explicit exploration, implicit gamma = eta/2
            self.game["q"] = torch.softmax(-eta * self.game["est_sum"], dim=0)
            self.game["eta_q"] = eta
            self.game["gamma"] = eta / 2 if r < m else 0.0
            return inclusion_probabilities(self.game["q"], r, 0.0)
        c, beta = 1.0, 0.0
        if self.explore:
            eta = min(eta, self._history_cap(r))
            # the optimistic bonus beta_t = b eta_t (0 unless q_bonus): the estimates
            # c (l_hat + beta / pi) need pi >= c eta (1 + beta)
            beta = self.q_bonus * eta
            # a round smaller than the step allows is down-weighted: c eta (1 + beta) <= rho(r)
            c = min(1.0, self._step_cap(r) / (eta * (1.0 + beta)))
        self.game["bonus"] = beta
        self.game["q"] = torch.softmax(eta * self.game["est_sum"], dim=0)
        gamma = exploration_rate(c * eta * (1.0 + beta), m, r) if self.explore else 0.0
        self.game["eta_q"], self.game["gamma"], self.game["round_weight"] = eta, gamma, c
        return inclusion_probabilities(self.game["q"], r, gamma)

    def _kappa(self, query: Query) -> float:
        return max_weight_sum(self.game["q"], query.pi, query.r)

    def _theta_weights(self, query: Query) -> Tensor:
        return self.game["q"][query.groups] / query.probs

    def _update_q(self, scaled: Tensor, query: Query, t: int) -> None:
        q = self.game["q"]
        if self.estimator == "ix":
            gamma = float(self.game["gamma"])
            est = ix_cost_estimates(scaled, query.groups, query.probs, self.n_groups, gamma)
            # e^{-x} <= 1 - x + x^2/2 (x >= 0): the second-order term carries a 1/2
            self.game["second_moment_sum"] += float(self.game["eta_q"] / 2 * (q * est**2).sum())
            pi = query.pi.to(torch.float64)
            self.game["bias_sum"] += gamma * float((q / (pi + gamma)).sum())
            if gamma > 0:
                self.game["gamma_min"] = min(self.game["gamma_min"], gamma)
            else:
                self.game["full_rounds"] += 1
        else:
            # the round's weighted gains c_t * l_hat_t (c_t = 1 unless the round is down-weighted)
            c = self._round_weight()
            est = c * importance_weighted_losses(scaled, query.groups, query.probs, self.n_groups)
            if self.q_bonus > 0:  # the optimistic bonus c beta / pi on every group
                est = est + c * self.game["bonus"] / query.pi.to(torch.float64)
            # the q-variance of the estimates: min over shifts c >= 0 of <q, (est - c)^2>
            var = max(0.0, float((q * est**2).sum()) - float((q * est).sum()) ** 2)
            self.game["second_moment_sum"] += float(self.game["eta_q"]) * var
            self.game["var_obs"] += var
            # (with ix, pi has no exploration floor and W is not used)
            self.game["inv_pi_sum"] = self.game["inv_pi_sum"] + c**2 / query.pi.to(torch.float64)
        c = self._round_weight()
        self.game["est_sum"] = self.game["est_sum"] + est
        kappa = max_weight_sum(q, query.pi, query.r)
        self.game["noise_sq_sum"] += c**2 * (kappa + 1.0) ** 2 * (self.grad_bound or 0.0) ** 2
        m, r = self.n_groups, query.r
        self.game["var_sum"] += m / r if self.estimator == "ix" else c**2 * variance_proxy(m, r)
        if self.estimator == "iw":
            # the cap of this round (samples and t still exclude it here)
            self.game["eta_cap"] = self._history_cap(r)

    def _check_bound_ready(self) -> None:
        if self.radius is None or self.grad_bound is None:
            raise ValueError("the bound needs radius and grad_bound")
        if not self.explore and self.estimator == "iw":
            raise ValueError("the bound needs the exploration (explore=True)")
        if self.t == 0:
            raise ValueError("the bound is defined after the first round")
        if self.q_bonus > 0:
            raise ValueError(
                "no bound is derived for the q_bonus variant (an experimental option; "
                'README, "Optimistic bonus")'
            )

    def bound(self) -> float:
        """:func:`fsq_bound` at the current round (needs ``radius`` and ``grad_bound``)."""
        self._check_bound_ready()
        return fsq_bound(
            self.weight_sum,
            self.game["var_sum"],
            self.n_groups,
            kappa_sq_sum=self.game["kappa_sq_sum"],
            reg_radius=self.reg_radius,
            grad_bound=self.grad_bound,
            lr_theta=self.param_groups[0]["lr_theta"],
            lr_q=self.lr_q,
            loss_bound=self.loss_bound,
            lag=self.kappa_bound_sq if self.theta_update == "ftrl" else 0.0,
            # the ix variant has no step cap (its estimates are nonnegative costs)
            q_cap=math.inf if self.estimator == "ix" else self.game["eta_cap"],
            adaptive_v0=ADAPTIVE_V0 if self.q_step == "adaptive" else None,
            theta_sq_sum=self.game["theta_sq_sum"],
        )

    def bound_hp(self, delta: float = 0.1) -> float:
        """:func:`fsq_bound_hp` (or :func:`fsq_bound_hp_ix` for ``estimator="ix"``) at the
        current round: holds with probability ``1 - delta``."""
        self._check_bound_ready()
        common = {
            "kappa_sq_sum": self.game["kappa_sq_sum"],
            "noise_sq_sum": self.game["noise_sq_sum"],
            "reg_radius": self.reg_radius,
            "radius": self.radius,
            "grad_bound": self.grad_bound,
            "lr_theta": self.param_groups[0]["lr_theta"],
            "loss_bound": self.loss_bound,
            "eta_q": self.game["eta_q"],
            "second_moment_sum": self.game["second_moment_sum"],
            "lag": self.kappa_bound_sq if self.theta_update == "ftrl" else 0.0,
            "theta_sq_sum": self.game["theta_sq_sum"],
        }
        if self.estimator == "ix":
            return fsq_bound_hp_ix(
                self.t,
                delta,
                self.n_groups,
                bias_sum=self.game["bias_sum"],
                gamma_min=self.game["gamma_min"],
                full_rounds=self.game["full_rounds"],
                **common,
            )
        return fsq_bound_hp(self.weight_sum, delta, inv_pi_sum=self.game["inv_pi_sum"], **common)


class OneSampleBandit(GDROFSQ):
    """The one-sample bandit baseline: :class:`GDROFSQ` restricted to ``r_t = 1``.

    The query is one group drawn from :math:`(1-\\gamma_t)q_t + \\gamma_t/m`; the gradient is
    that sample's, reweighted by :math:`q_{t,i}/\\pi_{t,i}`; ``q`` runs exponential weights on
    the importance-weighted loss estimate.
    """

    def _check_r(self, r: int) -> int:
        if check_sample_size(r, self.n_groups) != 1:
            raise ValueError(f"OneSampleBandit queries one sample per round, got r={r}")
        return 1

    def round(self, sampler: Any, r: int = 1) -> Tensor:
        """One round with a single sample."""
        return super().round(sampler, r)


class SMDFullInfo(GroupGame):
    r"""Stochastic mirror descent with ``m`` samples per round (one per group).

    Default (``q_update="md"``, ``theta_update="sgd"``):
    :math:`\theta_{t+1} = \Pi_\Theta(\theta_t - \eta^\theta_t\sum_i q_{t,i}\nabla\ell_i)`,
    :math:`q_{t+1} \propto q_t\, e^{\eta^q_t \ell_t / B}` (the entropic mirror step of
    :mod:`shared_core.mirror`), :math:`\eta^\theta_t = c_\theta/\sqrt t`,
    :math:`\eta^q_t = c_q\sqrt{\log m / t}`. The mirror step with a decreasing step gives
    :math:`q_{t+1} \propto \exp(\sum_{j\le t}\eta^q_j\ell_j/B)`: every past loss keeps the
    larger step of its own round, an effective rate about twice the last step
    (:math:`\sum_{j\le t}\eta^q_j \approx 2t\eta^q_t`).

    Options (README, "Full information, step for step"):

    * ``q_update="ftrl"``: :math:`q_t = \operatorname{softmax}(\eta^q_t\sum_{j<t}\ell_j/B)`,
      :math:`\eta^q_t = \min(c_q\sqrt{\log m/(v_m t)},\ \rho_m)` with the full-information
      variance proxy :math:`v_m` and cap :math:`\rho_m` of :class:`GDROFSQ`
      (:data:`FULL_INFO_VAR`, :data:`FULL_INFO_CAP`): exponential weights with the anytime FTRL
      step, which is what :class:`GDROFSQ` does at :math:`r_t = m`.
    * ``theta_update="ftrl-prox"``: proximal FTRL for :math:`\theta` (as :class:`GDROFSQ`).
      With both options the run is :class:`GDROFSQ` at :math:`r_t = m` step for step.
    * ``horizon=T``: constant steps tuned to :math:`T` rounds (the form of Zhang et al.'s SMD),
      :math:`\eta^\theta = c_\theta/\sqrt T`, :math:`\eta^q = c_q\sqrt{\log m/T}` (mirror and
      FTRL steps then coincide; no cap).
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        loss_fn: LossFn,
        n_groups: int,
        lr_theta: float,
        *,
        lr_q: float = 1.0,
        radius: float | None = None,
        loss_bound: float = 1.0,
        model: Any = None,
        q_update: str = "md",
        theta_update: str = "sgd",
        horizon: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        if q_update not in ("md", "ftrl"):
            raise ValueError(f"q_update must be 'md' or 'ftrl', got {q_update!r}")
        if theta_update not in ("sgd", "ftrl-prox"):
            raise ValueError(f"theta_update must be 'sgd' or 'ftrl-prox', got {theta_update!r}")
        if horizon is not None and (
            isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1
        ):
            raise ValueError(f"horizon must be a positive integer or None, got {horizon!r}")
        lr = _positive("lr_theta", lr_theta)
        super().__init__(
            params,
            loss_fn,
            n_groups,
            lr if horizon is None else lr / math.sqrt(horizon),
            model=model,
            loss_bound=loss_bound,
            radius=radius,
            theta_update=theta_update,
            theta_decay=horizon is None,
            generator=generator,
        )
        self.lr_q = _positive("lr_q", lr_q)
        self.q_update = q_update
        self.horizon = horizon
        self._mirror = get_mirror("entropy")
        self.game["gain_sum"] = torch.zeros(n_groups, dtype=torch.float64)

    def _check_r(self, r: int) -> int:
        if check_sample_size(r, self.n_groups) != self.n_groups:
            raise ValueError(f"SMDFullInfo queries all m={self.n_groups} groups, got r={r}")
        return self.n_groups

    def round(self, sampler: Any, r: int | None = None) -> Tensor:
        """One round with one sample from every group."""
        return super().round(sampler, self.n_groups if r is None else r)

    def _q_step(self, t: int) -> float:
        m = self.n_groups
        if self.horizon is not None:
            return q_step_size(self.lr_q, m, float(self.horizon))
        if self.q_update == "md":
            return q_step_size(self.lr_q, m, float(t))
        return min(q_step_size(self.lr_q, m, FULL_INFO_VAR * t), FULL_INFO_CAP)

    def _inclusion(self, r: int, t: int) -> Tensor:
        if self.q_update == "ftrl":
            self.game["q"] = torch.softmax(self._q_step(t) * self.game["gain_sum"], dim=0)
        return torch.ones(self.n_groups, dtype=torch.float64)

    def _theta_weights(self, query: Query) -> Tensor:
        return self.game["q"][query.groups]

    def _update_q(self, scaled: Tensor, query: Query, t: int) -> None:
        gain = torch.zeros(self.n_groups, dtype=torch.float64)
        gain[query.groups] = scaled
        self.game["gain_sum"] = self.game["gain_sum"] + gain
        if self.q_update == "md":
            self.game["q"] = self._mirror.step(self.game["q"], -gain, self._q_step(t))


class SagawaGDRO(GroupGame):
    r"""Online group DRO of Sagawa et al.: exponentiated gradient on the sampled groups' losses.

    ``r`` groups uniformly without replacement;
    :math:`q_{t+1,i} \propto q_{t,i} e^{\eta_q \ell_{t,i}/B}` for queried :math:`i` (raw losses,
    no importance weighting), :math:`\theta_{t+1} = \theta_t - \eta_\theta (m/r)
    \sum_{i\in S} q_{t,i}\nabla\ell_{t,i}`; constant step sizes.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        loss_fn: LossFn,
        n_groups: int,
        lr_theta: float,
        *,
        lr_q: float = 0.01,
        radius: float | None = None,
        loss_bound: float = 1.0,
        model: Any = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(
            params,
            loss_fn,
            n_groups,
            lr_theta,
            model=model,
            loss_bound=loss_bound,
            radius=radius,
            theta_update="sgd",
            theta_decay=False,
            generator=generator,
        )
        self.lr_q = _positive("lr_q", lr_q)
        self._mirror = get_mirror("entropy")

    def _inclusion(self, r: int, t: int) -> Tensor:
        return uniform_probabilities(self.n_groups, r)

    def _theta_weights(self, query: Query) -> Tensor:
        return self.game["q"][query.groups] * (self.n_groups / query.r)

    def _update_q(self, scaled: Tensor, query: Query, t: int) -> None:
        gain = torch.zeros(self.n_groups, dtype=torch.float64)
        gain[query.groups] = scaled
        self.game["q"] = self._mirror.step(self.game["q"], -gain, self.lr_q)


class ERM(GroupGame):
    r"""Empirical risk minimisation over the group mixture: uniform ``q``, SGD on the mean loss.

    ``r`` groups uniformly without replacement; :math:`\theta_{t+1} = \theta_t -
    \eta_t \frac1r\sum_{i\in S}\nabla\ell_{t,i}`, :math:`\eta_t = c_\theta/\sqrt t`.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        loss_fn: LossFn,
        n_groups: int,
        lr_theta: float,
        *,
        radius: float | None = None,
        loss_bound: float = 1.0,
        model: Any = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(
            params,
            loss_fn,
            n_groups,
            lr_theta,
            model=model,
            loss_bound=loss_bound,
            radius=radius,
            theta_update="sgd",
            theta_decay=True,
            generator=generator,
        )

    def _inclusion(self, r: int, t: int) -> Tensor:
        return uniform_probabilities(self.n_groups, r)

    def _theta_weights(self, query: Query) -> Tensor:
        return torch.full((query.r,), 1.0 / query.r, dtype=torch.float64)

    def _update_q(self, scaled: Tensor, query: Query, t: int) -> None:
        return None
