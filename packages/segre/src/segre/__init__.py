"""Rank-one tensor recovery on the Segre manifold: Riemannian gradient descent and Gauss-Newton.

Layers: :mod:`segre.tensors` (factored rank-one tensors, distances) ->
:mod:`segre.operators` (measurement operators on factored tensors) ->
:mod:`segre.problem` (loss, Riemannian gradient, Gauss-Newton pieces) ->
:mod:`segre.algorithms` (RGD, RGN, spectral start, noise floor) ->
:mod:`segre.baselines` (ALS, factor GD, tensorly CP-ALS, and :func:`solve`),
:mod:`segre.optim` (:class:`SegreSGD`, a ``torch.optim`` optimizer) ->
``segre.experiments``. The manifold itself is :class:`shared_core.manifolds.Segre`.
"""

from importlib.metadata import PackageNotFoundError, version

from .algorithms import (
    Trace,
    conjugate_gradient,
    gn_direction,
    noise_floor,
    rgd,
    rgn,
    spectral_init,
)
from .baselines import METHODS, als, factor_gd, solve, tensorly_cp
from .operators import (
    DenseSensing,
    FullObservation,
    MeasurementOperator,
    RankOneSensing,
    gaussian_sensing,
    rank_one_sensing,
)
from .optim import SegreSGD, rank_one_parameters
from .problem import RecoveryProblem, UnderdeterminedWarning
from .tensors import (
    degrees_of_freedom,
    frobenius_distance,
    frobenius_inner,
    make_point,
    random_rank_one,
    relative_error,
)

try:
    __version__ = version("segre")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = [
    "METHODS",
    "DenseSensing",
    "FullObservation",
    "MeasurementOperator",
    "RankOneSensing",
    "RecoveryProblem",
    "SegreSGD",
    "Trace",
    "UnderdeterminedWarning",
    "__version__",
    "als",
    "conjugate_gradient",
    "degrees_of_freedom",
    "factor_gd",
    "frobenius_distance",
    "frobenius_inner",
    "gaussian_sensing",
    "gn_direction",
    "make_point",
    "noise_floor",
    "random_rank_one",
    "rank_one_parameters",
    "rank_one_sensing",
    "relative_error",
    "rgd",
    "rgn",
    "solve",
    "spectral_init",
    "tensorly_cp",
]
