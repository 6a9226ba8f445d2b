"""Data-driven per-layer LMO geometry, from SGD to Muon (and Adam, MuAdam), via Schatten-p norms."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("adaptive-lmo")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
