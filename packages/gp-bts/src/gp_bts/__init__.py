"""Batched Gaussian-process Thompson sampling without an uncertainty-sampling warm-up, on BoTorch.

Floors (each imports only those above it): :mod:`gp_bts.regret` and :mod:`gp_bts.info_gain`
(pure math) -> :mod:`gp_bts.bounds` -> :mod:`gp_bts.models` (the BoTorch GP) ->
:mod:`gp_bts.pathmax` (maximising sample paths on a box) ->
:mod:`gp_bts.policy` (one round of each policy) -> :mod:`gp_bts.objectives` ->
:mod:`gp_bts.loop` (:func:`run`) -> ``gp_bts.experiments``.
"""

from importlib.metadata import PackageNotFoundError, version

from .loop import POLICIES, Trace, run
from .models import NOISELESS_JITTER, KernelSpec
from .objectives import Objective, ackley, branin, gp_prior_objective, hartmann6, tabular_svc

try:
    __version__ = version("gp-bts")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = [
    "NOISELESS_JITTER",
    "POLICIES",
    "KernelSpec",
    "Objective",
    "Trace",
    "__version__",
    "ackley",
    "branin",
    "gp_prior_objective",
    "hartmann6",
    "run",
    "tabular_svc",
]
