"""Intrinsic Muon: LMO steps in the Riemannian geometry of fixed-rank (LoRA), SPD, Stiefel and
Grassmann manifolds."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("imuon")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
