r"""Three boosting loops driving one :class:`~grn_boost.objectives.SchemeObjective`.

* ``native``: depth-limited trees from :class:`sklearn.tree.DecisionTreeRegressor` choose the
  partition (weighted least squares on :math:`-g/a` with weights :math:`a`, whose impurity
  decrease is exactly the quadratic model's Newton gain
  :math:`G_L^2/A_L + G_R^2/A_R - G^2/A`), and the leaf values are then set to the exact
  restricted step :func:`~grn_boost.newton.leaf_values` in float64. Every quantity of the
  analysis is exact here.
* ``catboost``: :mod:`grn_boost.catboost_backend` (a chunked objective whose scalar shift
  comes from a full-sample metric each round).
* ``xgboost`` / ``lightgbm``: the backend's own tree learner, fed ``(g, a)`` by a custom
  objective, with its per-leaf ``reg_lambda`` and minimum-Hessian guards set to 0 so that the
  step is the scheme's and nothing else (LightGBM keeps its default ``min_data_in_leaf = 20``).
  ``backend_params`` overrides any of these.

Each ``train_*`` runs ``rounds`` rounds (fewer if the loss stops being finite) and returns a
model with ``predict_margin(X, n_rounds=None)`` (the base score included).
"""

from __future__ import annotations

import numpy as np

from ._optional import require
from .catboost_backend import CatBoostModel, train_catboost
from .newton import leaf_values
from .objectives import SchemeObjective, lightgbm_objective, xgboost_objective

__all__ = [
    "BACKENDS",
    "CatBoostModel",
    "LightGBMModel",
    "NativeModel",
    "XGBoostModel",
    "base_margins",
    "require",
    "train",
]

BACKENDS = ("native", "xgboost", "lightgbm", "catboost")


def base_margins(base_score, n: int) -> np.ndarray:
    """The start margins of ``n`` rows: ``(n,)`` for a scalar, ``(n, K)`` for a ``K``-vector."""
    base = np.asarray(base_score, dtype=np.float64)
    return np.full(n, float(base)) if base.ndim == 0 else np.tile(base, (n, 1))


class NativeModel:
    """Trees (sklearn structures) with exact float64 leaf values, and a base score.

    Each round holds one tree per output (``K`` for softmax, one per class: the diagonal
    Hessian makes the joint restricted step separate by class).
    """

    def __init__(self, base_score, learning_rate: float):
        self.base_score = base_score
        self.learning_rate = learning_rate
        self.trees: list[list] = []  # per round: one tree per output
        self.values: list[list[np.ndarray]] = []  # per round and output: value of each node

    @property
    def n_rounds(self) -> int:
        return len(self.trees)

    def tree_output(self, k: int, X: np.ndarray) -> np.ndarray:
        """The unscaled output :math:`f_k(X)` of round ``k``: ``(n,)`` or ``(n, K)``."""
        outs = [v[t.apply(X)] for t, v in zip(self.trees[k], self.values[k], strict=True)]
        return outs[0] if len(outs) == 1 else np.stack(outs, axis=1)

    def predict_margin(self, X, n_rounds: int | None = None) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        n_rounds = self.n_rounds if n_rounds is None else n_rounds
        f = base_margins(self.base_score, X.shape[0])
        for k in range(n_rounds):
            f += self.learning_rate * self.tree_output(k, X)
        return f

    def staged_margins(self, X):
        """Margins after 0, 1, ..., ``n_rounds`` rounds (a generator)."""
        X = np.asarray(X, dtype=np.float64)
        f = base_margins(self.base_score, X.shape[0])
        yield f.copy()
        for k in range(self.n_rounds):
            f = f + self.learning_rate * self.tree_output(k, X)
            yield f.copy()


def _native_tree(tree_mod, X, g, a, max_depth, opts):
    """One tree for one output: the partition by weighted least squares, exact leaf values."""
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
    return tree, vals, vals[leaves]


def train_native(X, obj: SchemeObjective, base_score, rounds, learning_rate, max_depth, params):
    """Boost with sklearn tree structures and exact restricted-Newton leaf values."""
    tree_mod = require("sklearn.tree")
    X = np.asarray(X, dtype=np.float64)
    model = NativeModel(base_score, learning_rate)
    f = base_margins(base_score, X.shape[0])
    opts = {"min_samples_leaf": 1, "random_state": 0, **params}
    for _ in range(rounds):
        g, a = obj(f)
        if obj.stopped:
            break
        cols = [(g, a)] if g.ndim == 1 else [(g[:, k], a[:, k]) for k in range(g.shape[1])]
        fitted = [_native_tree(tree_mod, X, gk, ak, max_depth, opts) for gk, ak in cols]
        step = fitted[0][2] if g.ndim == 1 else np.stack([t[2] for t in fitted], axis=1)
        with np.errstate(over="ignore", invalid="ignore"):
            f = f + learning_rate * step
        model.trees.append([t[0] for t in fitted])
        model.values.append([t[1] for t in fitted])
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
            return base_margins(self.base_score, np.asarray(X).shape[0])
        d = xgb.DMatrix(np.asarray(X, dtype=np.float64))
        out = self.booster.predict(d, output_margin=True, iteration_range=(0, n_rounds))
        return self.base_score + np.asarray(out, dtype=np.float64)


def train_xgboost(X, obj: SchemeObjective, base_score, rounds, learning_rate, max_depth, params):
    """Boost with ``xgboost.Booster.update`` and the scheme's custom objective."""
    xgb = require("xgboost")
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    dtrain = xgb.DMatrix(X, label=obj.y, base_margin=base_margins(base_score, n))
    K = obj.loss.n_outputs
    p = {
        **({"num_class": K} if K > 1 else {}),
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
            return base_margins(self.base_score, np.asarray(X).shape[0])
        out = self.booster.predict(
            np.asarray(X, dtype=np.float64), raw_score=True, num_iteration=n_rounds
        )
        return self.base_score + np.asarray(out, dtype=np.float64)


def train_lightgbm(X, obj: SchemeObjective, base_score, rounds, learning_rate, max_depth, params):
    """Boost with ``lightgbm.Booster.update`` and the scheme's callable objective."""
    lgb = require("lightgbm")
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    K = obj.loss.n_outputs
    p = {
        **({"num_class": K} if K > 1 else {}),
        "objective": "none",
        "learning_rate": learning_rate,
        "max_depth": max_depth,
        "num_leaves": 2**max_depth,
        "lambda_l2": 0.0,
        # not 0: LightGBM estimates a child's row count from its Hessian sum and, with 0,
        # can pick an empty child and abort (measured: GRN, 100k rows, depth 6, round 22);
        # 1e-9 only refuses children with no curvature at all (empty, or an infinite step)
        "min_sum_hessian_in_leaf": 1e-9,
        # LightGBM's own default; with 1 its histogram counts (estimated from the Hessian
        # sums) let it pick an empty child and abort (measured at 100k rows, GRN, depth 6)
        "min_data_in_leaf": 20,
        "boost_from_average": False,
        "num_threads": 1,
        "verbose": -1,
        **params,
    }
    init = base_margins(base_score, n)
    dtrain = lgb.Dataset(X, label=obj.y, init_score=init, params={"verbose": -1})
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


_TRAIN = {
    "native": train_native,
    "xgboost": train_xgboost,
    "lightgbm": train_lightgbm,
    "catboost": train_catboost,
}


def train(backend: str, X, obj, base_score, rounds, learning_rate, max_depth, params=None):
    """Dispatch to ``train_<backend>``; ``ValueError`` for an unknown backend name."""
    if backend not in _TRAIN:
        raise ValueError(f"unknown backend {backend!r}; known: {list(BACKENDS)}")
    return _TRAIN[backend](X, obj, base_score, rounds, learning_rate, max_depth, dict(params or {}))
