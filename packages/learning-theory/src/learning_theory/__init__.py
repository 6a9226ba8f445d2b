"""Executable high-arity sample compression and language generation in the limit."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("learning-theory")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
