r"""The baselines, in :class:`~gdro_fsq.game.GroupGame`'s interface.

* :class:`OneSampleBandit`: the method restricted to :math:`r_t = 1` (one sample per round).
* :class:`SMDFullInfo`: stochastic mirror descent with :math:`m` samples per round; options make
  it :class:`~gdro_fsq.fsq.GDROFSQ` at :math:`r = m` step for step, or give it the method's
  adaptive ``q`` step alone (``q_step="adaptive"``).
* :class:`SagawaGDRO`: online group DRO (exponentiated gradient on the sampled groups' raw
  losses, constant steps).
* :class:`ERM`: uniform weights, SGD on the average loss.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from shared_core.mirror import get_mirror

from .estimates import ADAPTIVE_V0, FULL_INFO_CAP, FULL_INFO_VAR, q_step_size, q_variance
from .fsq import GDROFSQ
from .game import GroupGame, LossFn, Query, RoundWeights, positive
from .sampling import check_sample_size, uniform_probabilities

__all__ = ["ERM", "OneSampleBandit", "SMDFullInfo", "SagawaGDRO"]

#: the ``q`` steps of :class:`SMDFullInfo`: the schedule fixed in advance (``"bound"``, as
#: for :class:`~gdro_fsq.fsq.GDROFSQ`), or GDRO-FSQ's adaptive step on the observed variances.
SMD_Q_STEPS = ("bound", "adaptive")


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

    Options (docs/diagnosis.md, "Full information, step for step"):

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
    * ``q_step="adaptive"`` (with ``q_update="ftrl"``, no ``horizon``): GDRO-FSQ's adaptive
      step, :math:`\eta^q_t = \min(c_q\sqrt{\log m/(v_0 + X_{t-1})},\ \rho_m)`,
      :math:`X_t = \sum_{j\le t}\operatorname{Var}_{q_j}(\ell_j/B)` the observed
      :math:`q`-variances of the losses (:data:`~gdro_fsq.estimates.ADAPTIVE_V0` = :math:`v_0`).
      It isolates the step: the ``m``-sample baseline with the method's ``q`` step and
      nothing else of the method. With ``theta_update="ftrl-prox"`` as well the run is
      :class:`GDROFSQ` (default ``q_step``) at :math:`r_t = m` step for step.

    Raises:
        ValueError: a bad value, or ``q_step="adaptive"`` with ``q_update="md"`` or with a
            ``horizon`` (the adaptive step is an anytime FTRL step).
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
        q_step: str = "bound",
        generator: torch.Generator | None = None,
    ) -> None:
        if q_update not in ("md", "ftrl"):
            raise ValueError(f"q_update must be 'md' or 'ftrl', got {q_update!r}")
        if q_step not in SMD_Q_STEPS:
            raise ValueError(f"q_step must be one of {SMD_Q_STEPS}, got {q_step!r}")
        if q_step == "adaptive" and q_update != "ftrl":
            raise ValueError(
                f"q_step='adaptive' does not combine with q_update={q_update!r}: the adaptive "
                "step is an FTRL step (pass q_update='ftrl')"
            )
        if q_step == "adaptive" and horizon is not None:
            raise ValueError(
                f"q_step='adaptive' does not combine with horizon={horizon!r}: the adaptive "
                "step is anytime (leave horizon unset)"
            )
        if theta_update not in ("sgd", "ftrl-prox"):
            raise ValueError(f"theta_update must be 'sgd' or 'ftrl-prox', got {theta_update!r}")
        if horizon is not None and (
            isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1
        ):
            raise ValueError(f"horizon must be a positive integer or None, got {horizon!r}")
        lr = positive("lr_theta", lr_theta)
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
        self.lr_q = positive("lr_q", lr_q)
        self.q_update = q_update
        self.q_step = q_step
        self.horizon = horizon
        self._mirror = get_mirror("entropy")
        self.game["gain_sum"] = torch.zeros(n_groups, dtype=torch.float64)
        self.game["var_obs"] = 0.0  # X_t of q_step="adaptive"

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
        if self.q_step == "adaptive":
            var = ADAPTIVE_V0 + self.game["var_obs"]
            return min(q_step_size(self.lr_q, m, var), FULL_INFO_CAP)
        return min(q_step_size(self.lr_q, m, FULL_INFO_VAR * t), FULL_INFO_CAP)

    def _inclusion(self, r: int, t: int) -> tuple[Tensor, RoundWeights]:
        eta = self._q_step(t)
        if self.q_update == "ftrl":
            self.game["q"] = torch.softmax(eta * self.game["gain_sum"], dim=0)
        return torch.ones(self.n_groups, dtype=torch.float64), RoundWeights(eta=eta)

    def _theta_weights(self, query: Query) -> Tensor:
        return self.game["q"][query.groups]

    def _update_q(self, scaled: Tensor, query: Query, t: int) -> None:
        gain = torch.zeros(self.n_groups, dtype=torch.float64)
        gain[query.groups] = scaled
        self.game["gain_sum"] = self.game["gain_sum"] + gain
        if self.q_step == "adaptive":  # the q-variance of the round's gains, as GDRO-FSQ's X_t
            self.game["var_obs"] += q_variance(self.game["q"], gain)
        if self.q_update == "md":
            self.game["q"] = self._mirror.step(self.game["q"], -gain, query.weights.eta)


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
        self.lr_q = positive("lr_q", lr_q)
        self._mirror = get_mirror("entropy")

    def _inclusion(self, r: int, t: int) -> tuple[Tensor, RoundWeights]:
        return uniform_probabilities(self.n_groups, r), RoundWeights()

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

    def _inclusion(self, r: int, t: int) -> tuple[Tensor, RoundWeights]:
        return uniform_probabilities(self.n_groups, r), RoundWeights()

    def _theta_weights(self, query: Query) -> Tensor:
        return torch.full((query.r,), 1.0 / query.r, dtype=torch.float64)

    def _update_q(self, scaled: Tensor, query: Query, t: int) -> None:
        return None
