"""The optimizers and their helpers under one name (kept for existing imports).

The code lives in small modules, each importing only those below it:

* :mod:`gdro_fsq.estimates`: player 2's estimates and step sizes (pure functions);
* :mod:`gdro_fsq.bounds`: the error bounds (pure functions of the running sums);
* :mod:`gdro_fsq.game`: :class:`GroupGame` (planning, the :math:`\\theta` player, averaging,
  ``state_dict``), :class:`Query`, :class:`RoundWeights`;
* :mod:`gdro_fsq.fsq`: :class:`GDROFSQ`, the method, and its option checks;
* :mod:`gdro_fsq.baselines`: :class:`OneSampleBandit`, :class:`SMDFullInfo`,
  :class:`SagawaGDRO`, :class:`ERM`.

``from gdro_fsq.optim import GDROFSQ, fsq_bound, ...`` keeps working.
"""

from __future__ import annotations

from .baselines import ERM, SMD_Q_STEPS, OneSampleBandit, SagawaGDRO, SMDFullInfo
from .bounds import HP_GRID, HP_GRID_IX, fsq_bound, fsq_bound_hp, fsq_bound_hp_ix, ix_grid
from .estimates import (
    ADAPTIVE_V0,
    FULL_INFO_CAP,
    FULL_INFO_VAR,
    exploration_rate,
    importance_weighted_losses,
    ix_cost_estimates,
    q_step_size,
    variance_proxy,
)
from .fsq import ESTIMATORS, GDROFSQ, Q_STEPS, STEP_CAPS, THETA_STEPS, resolve_options
from .game import THETA_UPDATES, GroupGame, LossFn, Query, RoundWeights

__all__ = [
    "ADAPTIVE_V0",
    "ERM",
    "ESTIMATORS",
    "FULL_INFO_CAP",
    "FULL_INFO_VAR",
    "GDROFSQ",
    "HP_GRID",
    "HP_GRID_IX",
    "Q_STEPS",
    "SMD_Q_STEPS",
    "STEP_CAPS",
    "THETA_STEPS",
    "THETA_UPDATES",
    "GroupGame",
    "LossFn",
    "OneSampleBandit",
    "Query",
    "RoundWeights",
    "SMDFullInfo",
    "SagawaGDRO",
    "exploration_rate",
    "fsq_bound",
    "fsq_bound_hp",
    "fsq_bound_hp_ix",
    "importance_weighted_losses",
    "ix_cost_estimates",
    "ix_grid",
    "q_step_size",
    "resolve_options",
    "variance_proxy",
]
