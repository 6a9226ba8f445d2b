"""Functional gradient descent with adaptive representations for regression, PDEs and vision."""

from importlib.metadata import PackageNotFoundError, version

from .fgd import AdaptiveFGD, FitResult, RepresentationCapError, StepRecord, refine_until
from .neural import NeuralFeatures
from .representations import FeatureFamily, KernelCentres, NestedRidge, RandomFourierFeatures

try:
    __version__ = version("adaptive-fgd")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = [
    "AdaptiveFGD",
    "FeatureFamily",
    "FitResult",
    "KernelCentres",
    "NestedRidge",
    "NeuralFeatures",
    "RandomFourierFeatures",
    "RepresentationCapError",
    "StepRecord",
    "__version__",
    "refine_until",
]
