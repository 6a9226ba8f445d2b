"""Mixture-of-Experts parameterisations (SP, muP, MSSP) with learning-rate transfer."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mssp")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
