"""Numerical Feature Inflation: detect, reproduce and prevent absorption-driven loss spikes of
cross-entropy.

Floors: :mod:`nfi.floats` (when a float addition is lost) -> :mod:`nfi.thresholds` (when CE's
target gradient rounds to zero) -> :mod:`nfi.dynamics` (the drift and its feedback loop) ->
:mod:`nfi.loss` (the zero-sum fix) and :mod:`nfi.monitor` (the detector) -> ``experiments``.
"""

from importlib.metadata import PackageNotFoundError, version

from .dynamics import (
    class_mean,
    classifier_mean_drift,
    mean_pair_step,
    predicted_growth_rate,
    zero_sum_violation,
)
from .floats import absorbed_update_mask, absorbs, absorption_limits, unit_roundoff
from .loss import StableCrossEntropy, stable_cross_entropy
from .monitor import Monitor
from .thresholds import (
    absorbed_rows,
    effective_gap,
    gap_threshold,
    measure_gap_threshold,
    predicted_absorbed,
    threshold_bounds,
)

try:
    __version__ = version("nfi")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = [
    "Monitor",
    "StableCrossEntropy",
    "__version__",
    "absorbed_rows",
    "absorbed_update_mask",
    "absorbs",
    "absorption_limits",
    "class_mean",
    "classifier_mean_drift",
    "effective_gap",
    "gap_threshold",
    "mean_pair_step",
    "measure_gap_threshold",
    "predicted_absorbed",
    "predicted_growth_rate",
    "stable_cross_entropy",
    "threshold_bounds",
    "unit_roundoff",
    "zero_sum_violation",
]
