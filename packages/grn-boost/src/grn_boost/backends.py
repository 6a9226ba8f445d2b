r"""Three boosting loops driving one :class:`~grn_boost.objectives.SchemeObjective`.

* ``native``: depth-limited trees from :class:`sklearn.tree.DecisionTreeRegressor` choose the
  partition (weighted least squares on :math:`-g/a` with weights :math:`a`, whose impurity
  decrease is exactly the quadratic model's Newton gain
  :math:`G_L^2/A_L + G_R^2/A_R - G^2/A`), and the leaf values are then set to the exact
  restricted step :func:`~grn_boost.newton.leaf_values` in float64. Every quantity of the
  analysis is exact here.
* ``xgboost`` / ``lightgbm``: the backend's own tree learner, fed ``(g, a)`` by a custom
  objective, with its per-leaf ``reg_lambda`` and minimum-Hessian guards set to 0 so that the
  step is the scheme's and nothing else (LightGBM keeps its default ``min_data_in_leaf = 20``).
  ``backend_params`` overrides any of these.

Each ``train_*`` runs ``rounds`` rounds (fewer if the loss stops being finite) and returns a
model with ``predict_margin(X, n_rounds=None)`` (the base score included).
"""

from __future__ import annotations

import importlib

import numpy as np

from .newton import leaf_values
from .objectives import SchemeObjective, lightgbm_objective, xgboost_objective

__all__ = [
    "BACKENDS",
    "LightGBMModel",
    "NativeModel",
    "XGBoostModel",
    "require",
    "train",
]

BACKENDS = ("native", "xgboost", "lightgbm")
_EXTRA = {"xgboost": "xgboost", "lightgbm": "lightgbm", "sklearn": "native"}


def require(module: str):
    """Import an optional dependency, or raise ``ImportError`` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        extra = _EXTRA.get(module.split(".")[0], module)
        raise ImportError(
            f"this backend needs {module!r}: pip install 'grn-boost[{extra}]'"
        ) from err


class NativeModel:
    """Trees (sklearn structures) with exact float64 leaf values, and a base score."""

    def __init__(self, base_score: float, learning_rate: float):
        self.base_score = base_score
        self.learning_rate = learning_rate
        self.trees: list = []
        self.values: list[np.ndarray] = []  # per tree: value of each node id

    @property
    def n_rounds(self) -> int:
        return len(self.trees)

    def tree_output(self, k: int, X: np.ndarray) -> np.ndarray:
        """The unscaled output :math:`f_k(X)` of tree ``k``."""
        return self.values[k][self.trees[k].apply(X)]

    def predict_margin(self, X, n_rounds: int | None = None) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        n_rounds = self.n_rounds if n_rounds is None else n_rounds
        f = np.full(X.shape[0], self.base_score)
        for k in range(n_rounds):
            f += self.learning_rate * self.tree_output(k, X)
        return f

    def staged_margins(self, X):
        """Margins after 0, 1, ..., ``n_rounds`` rounds (a generator)."""
        X = np.asarray(X, dtype=np.float64)
        f = np.full(X.shape[0], self.base_score)
        yield f.copy()
        for k in range(self.n_rounds):
            f = f + self.learning_rate * self.tree_output(k, X)
            yield f.copy()


def train_native(X, obj: SchemeObjective, base_score, rounds, learning_rate, max_depth, params):
    """Boost with sklearn tree structures and exact restricted-Newton leaf values."""
    tree_mod = require("sklearn.tree")
    X = np.asarray(X, dtype=np.float64)
    model = NativeModel(base_score, learning_rate)
    f = np.full(X.shape[0], base_score)
    opts = {"min_samples_leaf": 1, "random_state": 0, **params}
    for _ in range(rounds):
        g, a = obj(f)
        if obj.stopped:
            break
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            pos = a > 0
            z = np.where(pos, -g / np.where(pos, a, 1.0), 0.0)
        tree = tree_mod.DecisionTreeRegressor(max_depth=max_depth, **opts)
        if np.all(np.isfinite(z)) and np.any(pos):
            tree.fit(X, z, sample_weight=np.where(pos, a, 0.0))
        else:  # nothing finite to fit: a single leaf
            tree.fit(X, np.zeros(X.shape[0]))
        leaves = tree.apply(X)
        vals = leaf_values(g, a, leaves, tree.tree_.node_count)
        with np.errstate(over="ignore", invalid="ignore"):
            f = f + learning_rate * vals[leaves]
        model.trees.append(tree)
        model.values.append(vals)
    obj.finish(f)
    return model


class XGBoostModel:
    """A trained ``xgboost.Booster`` plus the base score it was trained from."""

    def __init__(self, booster, base_score: float, n_rounds: int):
        self.booster, self.base_score, self.n_rounds = booster, base_score, n_rounds

    def predict_margin(self, X, n_rounds: int | None = None) -> np.ndarray:
        xgb = require("xgboost")
        n_rounds = self.n_rounds if n_rounds is None else n_rounds
        if n_rounds == 0:
            return np.full(np.asarray(X).shape[0], self.base_score)
        d = xgb.DMatrix(np.asarray(X, dtype=np.float64))
        out = self.booster.predict(d, output_margin=True, iteration_range=(0, n_rounds))
        return self.base_score + np.asarray(out, dtype=np.float64)


def train_xgboost(X, obj: SchemeObjective, base_score, rounds, learning_rate, max_depth, params):
    """Boost with ``xgboost.Booster.update`` and the scheme's custom objective."""
    xgb = require("xgboost")
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    dtrain = xgb.DMatrix(X, label=obj.y, base_margin=np.full(n, base_score))
    p = {
        "eta": learning_rate,
        "max_depth": max_depth,
        "lambda": 0.0,
        "min_child_weight": 0.0,
        "tree_method": "hist",
        "base_score": 0.0,
        "nthread": 1,
        "verbosity": 0,
        **params,
    }
    booster = xgb.Booster(p, [dtrain])
    fobj = xgboost_objective(obj)
    done = 0
    for k in range(rounds):
        booster.update(dtrain, k, fobj=fobj)
        if obj.stopped:
            break
        done = k + 1
    f = np.asarray(booster.predict(dtrain, output_margin=True), dtype=np.float64)
    obj.finish(f)
    return XGBoostModel(booster, base_score, done)


class LightGBMModel:
    """A trained ``lightgbm.Booster`` plus the base score (LightGBM does not store it)."""

    def __init__(self, booster, base_score: float, n_rounds: int):
        self.booster, self.base_score, self.n_rounds = booster, base_score, n_rounds

    def predict_margin(self, X, n_rounds: int | None = None) -> np.ndarray:
        n_rounds = self.n_rounds if n_rounds is None else n_rounds
        if n_rounds == 0:
            return np.full(np.asarray(X).shape[0], self.base_score)
        out = self.booster.predict(
            np.asarray(X, dtype=np.float64), raw_score=True, num_iteration=n_rounds
        )
        return self.base_score + np.asarray(out, dtype=np.float64)


def train_lightgbm(X, obj: SchemeObjective, base_score, rounds, learning_rate, max_depth, params):
    """Boost with ``lightgbm.Booster.update`` and the scheme's callable objective."""
    lgb = require("lightgbm")
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    p = {
        "objective": "none",
        "learning_rate": learning_rate,
        "max_depth": max_depth,
        "num_leaves": 2**max_depth,
        "lambda_l2": 0.0,
        "min_sum_hessian_in_leaf": 0.0,
        # LightGBM's own default; with 1 its histogram counts (estimated from the Hessian
        # sums) let it pick an empty child and abort (measured at 100k rows, GRN, depth 6)
        "min_data_in_leaf": 20,
        "boost_from_average": False,
        "num_threads": 1,
        "verbose": -1,
        **params,
    }
    dtrain = lgb.Dataset(X, label=obj.y, init_score=np.full(n, base_score), params={"verbose": -1})
    booster = lgb.Booster(p, dtrain)
    fobj = lightgbm_objective(obj)
    done = 0
    for _ in range(rounds):
        try:
            booster.update(fobj=fobj)
        except lgb.basic.LightGBMError as err:  # e.g. a split check failing on huge scores
            obj.abort(f"LightGBM aborted: {err}")
            break
        if obj.stopped:
            break
        done += 1
    model = LightGBMModel(booster, base_score, done)
    obj.finish(model.predict_margin(X))
    return model


_TRAIN = {"native": train_native, "xgboost": train_xgboost, "lightgbm": train_lightgbm}


def train(backend: str, X, obj, base_score, rounds, learning_rate, max_depth, params=None):
    """Dispatch to ``train_<backend>``; ``ValueError`` for an unknown backend name."""
    if backend not in _TRAIN:
        raise ValueError(f"unknown backend {backend!r}; known: {list(BACKENDS)}")
    return _TRAIN[backend](X, obj, base_score, rounds, learning_rate, max_depth, dict(params or {}))
