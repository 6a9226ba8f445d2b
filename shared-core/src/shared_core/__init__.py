"""shared-core: the numeric primitives every frontier-opt package stands on.

Subpackages (import them directly; nothing heavy is imported here):

- :mod:`shared_core.lmo`: norms, dual norms and linear minimization oracles.
- :mod:`shared_core.polar`: polar factor (``msign``), fractional spectral powers, SPD functions.
- :mod:`shared_core.manifolds`: Riemannian manifolds with one small interface.
- :mod:`shared_core.mirror`: mirror maps and Bregman divergences.
- :mod:`shared_core.routing`: which parameters of a model take a matrix update and which AdamW.
- :mod:`shared_core.kernels`: Triton kernels beside plain-torch references.
- :mod:`shared_core.bench`: the benchmark harness.
- :mod:`shared_core.experiment`: seeding, run folders, results, plots, progress bars.
- :mod:`shared_core.testing`: a local ``torchrun``-style launcher for multi-process tests.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("shared-core")
except PackageNotFoundError:  # running from a source tree without metadata
    __version__ = "0.0.0"

__all__ = ["__version__"]
