"""Feedback-informed in-context black-box optimisation with a pretrained transformer."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ficbo")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
