"""Executable high-arity sample compression and language generation in the limit.

Modules: :mod:`.compression` (classical schemes, checker, learner), :mod:`.halfspaces`
(halfspaces in R^d by their support set), :mod:`.bounds`
(Littlestone–Warmuth and high-arity bounds), :mod:`.high_arity` (product spaces, grid samples,
high-arity schemes), :mod:`.generation` (generation in the limit), :mod:`.samplers`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("learning-theory")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
