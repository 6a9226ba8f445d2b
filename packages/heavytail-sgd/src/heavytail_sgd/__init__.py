"""Stochastic mirror descent and SGD under heavy-tailed gradient noise, unmodified.

Noise models, a heavy-tailed stochastic oracle, tail-index estimators, the step sizes of the
analysis, and the optimizers (SMD; baselines ClippedSGD and NormalizedSGD).
"""

from importlib.metadata import PackageNotFoundError, version

from .noise import NoiseModel, StudentT, SymmetricAlphaStable, SymmetricPareto, norm_moment_bound
from .optim import SMD, ClippedSGD, NormalizedSGD
from .oracle import HeavyTailedOracle, add_gradient_noise_
from .simplex import Simplex, project_simplex
from .tail import TailEstimate, estimate_tail_index, hill, moment_estimator
from .tail_bias import hill_reduced_bias

try:
    __version__ = version("heavytail-sgd")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = [
    "SMD",
    "ClippedSGD",
    "HeavyTailedOracle",
    "NoiseModel",
    "NormalizedSGD",
    "Simplex",
    "StudentT",
    "SymmetricAlphaStable",
    "SymmetricPareto",
    "TailEstimate",
    "__version__",
    "add_gradient_noise_",
    "estimate_tail_index",
    "hill",
    "hill_reduced_bias",
    "moment_estimator",
    "norm_moment_bound",
    "project_simplex",
]
