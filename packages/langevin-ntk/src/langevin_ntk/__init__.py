"""L2-regularised Langevin training of neural networks and NTK stability, measured."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("langevin-ntk")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
