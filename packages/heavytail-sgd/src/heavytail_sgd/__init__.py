"""Stochastic mirror descent and SGD under heavy-tailed gradient noise, unmodified, with the step sizes and rates of the analysis."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("heavytail-sgd")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
