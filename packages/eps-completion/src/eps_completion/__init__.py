"""Matrix completion through ε-perturbations in the nullspace of the mask.

The ε-surrogate measures the observed entries exactly and every unobserved entry with weight
ε (:class:`EpsSensing`): a noisy matrix-sensing problem with an exact RIP constant, solved by
over-parameterised Burer–Monteiro GD (:func:`bm_gd`) or Riemannian GD (:func:`rgd`);
:class:`MatrixCompleter` is the front end, :mod:`eps_completion.baselines` holds ALS,
soft-impute, SVP and nuclear-norm minimisation on the plain problem.
"""

from importlib.metadata import PackageNotFoundError, version

from .completer import METHODS, MatrixCompleter
from .problem import Observations, low_rank_matrix, observe, random_mask
from .rip import RipEstimate, probe_rip
from .sensing import EpsSensing, rip_from_weights
from .solvers import SolveResult, bm_gd, rgd

try:
    __version__ = version("eps-completion")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = [
    "METHODS",
    "EpsSensing",
    "MatrixCompleter",
    "Observations",
    "RipEstimate",
    "SolveResult",
    "__version__",
    "bm_gd",
    "low_rank_matrix",
    "observe",
    "probe_rip",
    "random_mask",
    "rgd",
    "rip_from_weights",
]
