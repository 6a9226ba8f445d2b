"""L2-regularised Langevin training of neural networks and NTK stability, measured.

Layers: :mod:`.langevin` (the discretised SDE step, Gibbs law, quadratic closed forms) ->
:mod:`.optim` (the ``Langevin`` torch optimizer) and :mod:`.step_bias` (the chain's
stationary step-size bias); :mod:`.models` (MLPs) -> :mod:`.ntk` (empirical NTK, Lanczos,
stability measures), :mod:`.layerwise` (NTK by per-layer contraction) and :mod:`.kernels`
(infinite-width kernels) -> :mod:`.bounds` (lambda_min bounds and width/temperature
conditions) -> :mod:`.deep_bounds` (the init and stability bounds at any depth) ->
:mod:`.stability_radius` (the radius that keeps half of lambda_min) -> ``experiments``.
"""

from importlib.metadata import PackageNotFoundError, version

from .langevin import (
    euler_maruyama_step,
    gibbs_log_density,
    langevin_step,
    ou_step,
    quadratic_discrete_stationary,
    quadratic_stationary,
)
from .layerwise import layerwise_ntk
from .models import MLP
from .ntk import (
    NTKMonitor,
    empirical_ntk,
    jacobian,
    lanczos_extreme,
    mlp_ntk,
    ntk_matvec,
    ntk_min_eigenvalue,
    relative_change,
    weight_distance,
)
from .optim import Langevin

try:
    __version__ = version("langevin-ntk")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = [
    "MLP",
    "Langevin",
    "NTKMonitor",
    "__version__",
    "empirical_ntk",
    "euler_maruyama_step",
    "gibbs_log_density",
    "jacobian",
    "lanczos_extreme",
    "langevin_step",
    "layerwise_ntk",
    "mlp_ntk",
    "ntk_matvec",
    "ntk_min_eigenvalue",
    "ou_step",
    "quadratic_discrete_stationary",
    "quadratic_stationary",
    "relative_change",
    "weight_distance",
]
