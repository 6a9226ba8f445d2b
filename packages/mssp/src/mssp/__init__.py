"""Mixture-of-Experts parameterisations (SP, muP, MSSP) with learning-rate transfer."""

from importlib.metadata import PackageNotFoundError, version

from .layers import MoELayer, MoEModel
from .observables import Observables, probe
from .parameterize import assign_roles, parameterize, size_ratios
from .routing import combine, dispatch, expert_mlp, load_balancing_loss, topk_route
from .tables import EXPECTED, OPTIMIZERS, REGIMES, ROLES, SCHEMES, get_scheme, table_markdown
from .train import ClusterTeacher, train

try:
    __version__ = version("mssp")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = [
    "EXPECTED",
    "OPTIMIZERS",
    "REGIMES",
    "ROLES",
    "SCHEMES",
    "ClusterTeacher",
    "MoELayer",
    "MoEModel",
    "Observables",
    "__version__",
    "assign_roles",
    "combine",
    "dispatch",
    "expert_mlp",
    "get_scheme",
    "load_balancing_loss",
    "parameterize",
    "probe",
    "size_ratios",
    "table_markdown",
    "topk_route",
    "train",
]
