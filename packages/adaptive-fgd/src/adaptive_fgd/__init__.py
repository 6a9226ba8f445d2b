"""Functional gradient descent with adaptive representations for regression, PDEs and vision."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("adaptive-fgd")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
