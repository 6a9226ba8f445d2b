"""LA, SLA, DiLoCo and DiLoCo with error-feedback compression on torch.distributed."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("diloco-ef")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
