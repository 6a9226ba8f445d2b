"""Batched Gaussian-process Thompson sampling without an uncertainty-sampling warm-up, on BoTorch."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gp-bts")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
