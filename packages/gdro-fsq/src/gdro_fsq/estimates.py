r"""Player 2's estimates and step sizes: pure functions of one round.

The max player (``q``) sees only the queried groups' losses. These functions turn them into
estimates of the full loss vector and size its exponential-weights step; the optimizers of
:mod:`gdro_fsq.fsq` and :mod:`gdro_fsq.baselines` only wire them. Derivations:
``docs/math.md``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "ADAPTIVE_V0",
    "FULL_INFO_CAP",
    "FULL_INFO_VAR",
    "exploration_rate",
    "importance_weighted_losses",
    "ix_cost_estimates",
    "q_step_size",
    "q_variance",
    "variance_proxy",
]

#: player 2's per-round variance proxy at :math:`r = m` (:func:`variance_proxy`) and its step
#: cap there; :class:`~gdro_fsq.baselines.SMDFullInfo` with ``q_update="ftrl"`` uses them.
FULL_INFO_VAR = 0.25
FULL_INFO_CAP = 1.0
#: the prior variance :math:`v_0` of the adaptive ``q`` step (``q_step="adaptive"``).
ADAPTIVE_V0 = 1.0


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
    \le \sum_i q_i/\pi_i - 3/4 \le m/r - 3/4` (docs/math.md, "The centred second moment"). At
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
    :math:`\eta_t \hat\ell_{t,i} \le 1` (:class:`~gdro_fsq.fsq.GDROFSQ` caps
    :math:`\eta_t \le r_t/(2m)`, so the minimum with 1/2 is not needed there), and it vanishes
    like :math:`\sqrt{m\log m/(r t)}`. With :math:`r_t = m` it has no effect (every group is
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
    bound :func:`~gdro_fsq.bounds.fsq_bound_hp_ix` its :math:`\sqrt t` rate (docs/math.md,
    "Implicit exploration").

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


def q_variance(q: Tensor, est: Tensor) -> float:
    r""":math:`\operatorname{Var}_q(x) = \langle q, x^2\rangle - \langle q, x\rangle^2`, floored
    at 0 (rounding): the round's term of the adaptive step's :math:`X_t` and of :math:`A_t`.

    Exponential weights are blind to a common shift of the gains, so the potential's
    second-order term can be taken around the best shift :math:`\langle q, x\rangle`
    (docs/math.md, "The centred second moment").

    Example:
        >>> q_variance(torch.tensor([0.5, 0.5]), torch.tensor([0.0, 2.0]))
        1.0
    """
    return max(0.0, float((q * est**2).sum()) - float((q * est).sum()) ** 2)
