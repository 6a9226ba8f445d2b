"""Numerical Feature Inflation: detect, reproduce and prevent absorption-driven loss spikes of
cross-entropy."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("nfi")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
