"""Matrix completion through epsilon-perturbations in the nullspace of the mask."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("eps-completion")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
