"""Data-driven per-layer LMO geometry, from SGD to Muon (and Adam, MuAdam), via Schatten-p norms.

- :class:`AdaptiveLMO`: the optimizer (``torch.optim`` conventions).
- :func:`fractional_update`: :math:`U\\,\\mathrm{diag}(s^a)\\,V^\\top`, the SGD-to-Muon family.
- :func:`choose_exponent`, :func:`surrogate_decrease`: the criterion and its surrogate.
- :class:`ActivationCollector`: hook statistics (input rows; output-gradient rows for K-FAC).
- :func:`find_head`: the output head read from a forward pass (routing).
- :func:`sample_output_gradient`: sampled-target output gradients (the true Fisher).
"""

from importlib.metadata import PackageNotFoundError, version

from .criterion import (
    alignment,
    choose_exponent,
    curvature_along,
    curvature_matrix,
    kfac_curvature,
    loglog_exponent,
    surrogate_decrease,
    surrogate_exponent,
)
from .fisher import sample_output_gradient
from .fractional import fractional_update, schatten_p, svd_factors
from .optim import AdaptiveLMO
from .routing import find_head
from .stats import ActivationCollector

try:
    __version__ = version("adaptive-lmo")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = [
    "ActivationCollector",
    "AdaptiveLMO",
    "__version__",
    "alignment",
    "choose_exponent",
    "curvature_along",
    "curvature_matrix",
    "find_head",
    "fractional_update",
    "kfac_curvature",
    "loglog_exponent",
    "sample_output_gradient",
    "schatten_p",
    "surrogate_decrease",
    "surrogate_exponent",
    "svd_factors",
]
