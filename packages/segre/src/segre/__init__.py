"""Rank-one tensor recovery on the Segre manifold: Riemannian gradient descent and Gauss-Newton."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("segre")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
