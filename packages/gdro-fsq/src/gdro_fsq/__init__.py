"""Anytime group distributionally robust optimization with flexible sample queries."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gdro-fsq")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
