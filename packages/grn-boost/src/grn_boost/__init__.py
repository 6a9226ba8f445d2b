"""Restricted Newton Descent for gradient boosting, as custom objectives inside XGBoost and
LightGBM."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("grn-boost")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
