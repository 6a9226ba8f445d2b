"""Restricted Newton Descent for gradient boosting, as custom objectives inside XGBoost and
LightGBM.

Layers: :mod:`~grn_boost.losses` (per-sample losses and their derivatives) ->
:mod:`~grn_boost.newton` (the step and the diagnostics, pure functions) ->
:mod:`~grn_boost.objectives` (custom objectives with per-round records) ->
:mod:`~grn_boost.backends` (native / XGBoost / LightGBM / CatBoost loops) -> :mod:`~grn_boost.api`
(:func:`fit` and the sklearn-style estimators) -> ``experiments``.
"""

from importlib.metadata import PackageNotFoundError, version

from .api import BoostResult, GRNBoostClassifier, GRNBoostRegressor, fit
from .losses import LOSSES, Loss, get_loss
from .newton import (
    SCHEMES,
    cosine_angle,
    descent_certificate,
    gradient_edge,
    grn_regulariser,
    leaf_values,
    modified_hessian,
    newton_direction,
)
from .objectives import SchemeObjective, grad_hess, lightgbm_objective, xgboost_objective

try:
    __version__ = version("grn-boost")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = [
    "LOSSES",
    "SCHEMES",
    "BoostResult",
    "GRNBoostClassifier",
    "GRNBoostRegressor",
    "Loss",
    "SchemeObjective",
    "__version__",
    "cosine_angle",
    "descent_certificate",
    "fit",
    "get_loss",
    "grad_hess",
    "gradient_edge",
    "grn_regulariser",
    "leaf_values",
    "lightgbm_objective",
    "modified_hessian",
    "newton_direction",
    "xgboost_objective",
]
