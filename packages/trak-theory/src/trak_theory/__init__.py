"""TRAK data attribution with a seeded on-the-fly sketch, exact leave-one-out ground truth and the
theory's diagnostics."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("trak-theory")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

from .trak import TRAK

__all__ = ["TRAK", "__version__"]
