"""Evolving Programmatic Bottlenecks: distil a neural combinatorial-optimization policy into a
readable program portfolio."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("epb")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
