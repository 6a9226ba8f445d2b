"""One entry point for the three backends: :func:`fit`, and sklearn-style estimators.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(200, 2)); y = 5 * X[:, 0] + rng.normal(size=200)
    >>> res = fit(X, y, loss="pseudo_huber", backend="native", rounds=5, max_depth=2)
    >>> len(res.history["loss"]), res.history["loss"][-1] < res.history["loss"][0]
    (6, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .backends import BACKENDS, require, train
from .losses import Logistic, Loss, Poisson, Softmax, as_float_array, get_loss
from .newton import SCHEMES
from .objectives import SchemeObjective

__all__ = ["BoostResult", "GRNBoostClassifier", "GRNBoostRegressor", "fit"]


def _inverse_link(loss: Loss, margin: np.ndarray) -> np.ndarray:
    if isinstance(loss, Logistic):
        return 0.5 * (1.0 + np.tanh(0.5 * margin))
    if isinstance(loss, Poisson):
        return np.exp(margin)
    if isinstance(loss, Softmax):
        e = np.exp(margin - np.max(margin, axis=1, keepdims=True))
        return e / np.sum(e, axis=1, keepdims=True)
    return margin


@dataclass
class BoostResult:
    """A fitted booster and its per-round record.

    Attributes:
        model: the backend model (``predict_margin(X, n_rounds=None)``).
        loss: the loss trained.
        history: ``evals_result``-style dict (see ``objectives.HISTORY_KEYS``): ``loss`` has
            ``n_rounds + 1`` entries, ``grad_norm``, ``reg`` (the shift lambda), ``M``,
            ``cosine`` and ``edge`` one per round.
        backend, scheme: as given.
        diverged: whether training stopped early (a non-finite loss, or the backend aborted).
        stop_reason: why it stopped early, or ``None``.
    """

    model: object
    loss: Loss
    history: dict[str, list[float]]
    backend: str
    scheme: str
    diverged: bool
    stop_reason: str | None = None

    @property
    def n_rounds(self) -> int:
        return self.model.n_rounds

    def predict_margin(self, X, n_rounds: int | None = None) -> np.ndarray:
        """Raw scores ``F(X)`` after ``n_rounds`` rounds (default all)."""
        return self.model.predict_margin(_check_X(X), n_rounds)

    def predict(self, X, n_rounds: int | None = None) -> np.ndarray:
        """Predictions on the response scale (probability for logistic, mean for Poisson)."""
        return _inverse_link(self.loss, self.predict_margin(X, n_rounds))

    def staged_predict(self, X):
        """Response-scale predictions after 1, 2, ..., ``n_rounds`` rounds (a generator)."""
        X = _check_X(X)
        staged = getattr(self.model, "staged_margins", None)
        if staged is not None:  # native: one pass, O(n) per round
            for k, margin in enumerate(staged(X)):
                if k > 0:
                    yield _inverse_link(self.loss, margin)
            return
        for k in range(1, self.n_rounds + 1):
            yield self.predict(X, k)


def _check_X(X) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty 2-d array, got shape {X.shape}")
    if np.any(np.isinf(X)):
        raise ValueError("X has an infinite entry")
    return X


def _check_base_score(loss: Loss, y: np.ndarray, base_score):
    """The start margin: the loss's best constant, or ``base_score`` (scalar, or ``K``-vector)."""
    K = loss.n_outputs
    if base_score is None:
        base_score = loss.init_score(y)
    base = np.asarray(base_score, dtype=np.float64)
    if base.shape not in ((), (K,)) or (K > 1 and base.ndim == 0):
        shape = "a number" if K == 1 else f"a vector of {K}"
        raise ValueError(f"base_score must be {shape}, got shape {base.shape}")
    if not np.all(np.isfinite(base)):
        raise ValueError(f"base_score must be finite, got {base_score}")
    return float(base) if K == 1 else base


def fit(
    X,
    y,
    loss: str | Loss = "pseudo_huber",
    *,
    backend: str = "native",
    scheme: str = "grn",
    rounds: int = 100,
    learning_rate: float = 1.0,
    max_depth: int = 3,
    M: float | None = None,
    sample_weight=None,
    base_score: float | None = None,
    loss_params: dict | None = None,
    backend_params: dict | None = None,
) -> BoostResult:
    r"""Boost ``rounds`` trees with the chosen scheme inside the chosen backend.

    Args:
        X: features, shape ``(n, d)``.
        y: labels, shape ``(n,)`` (checked by the loss: e.g. ``[0, 1]`` for logistic).
        loss: a name of ``grn_boost.losses.LOSSES`` or a ``Loss``.
        backend: ``"native"`` (sklearn tree structures, exact float64 leaf values; extra
            ``native``), ``"xgboost"``, ``"lightgbm"`` or ``"catboost"`` (extras of the same
            names; CatBoost's shift comes from a full-sample metric each round, see
            :mod:`grn_boost.catboost_backend`).
        scheme: ``"grn"`` (Hessian + :math:`\sqrt{M\|g\|}` per sample), ``"newton"``
            (vanilla Newton boosting) or ``"gradient"`` (first-order boosting).
        rounds: number of boosting rounds, ``>= 0``.
        learning_rate: :math:`\eta \in (0, 1]` multiplies each tree (the GRN guarantees
            need :math:`\eta \le 1`; larger values are refused).
        max_depth: tree depth, ``>= 1``.
        M: Hessian-Lipschitz constant of the loss (``> 0``); default the loss's
            :math:`\sup|l'''|` over the square root of the smallest positive weight
            (estimated at each iterate for Poisson; softmax: the proved bound :math:`1/\sqrt2`).
        sample_weight: optional weights, shape ``(n,)``, ``>= 0``.
        base_score: starting margin (a ``K``-vector for softmax); default the loss's best
            constant.
        loss_params: parameters of a named loss (e.g. ``{"delta": 1.0}``).
        backend_params: extra parameters passed to the backend's tree learner.

    Returns:
        :class:`BoostResult`.

    Raises:
        ValueError: bad shapes, non-finite or out-of-range labels, unknown names, ``M <= 0``.
        ImportError: the backend is not installed (the message names the extra).
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; known: {list(BACKENDS)}")
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; known: {list(SCHEMES)}")
    if not (isinstance(rounds, int | np.integer) and rounds >= 0):
        raise ValueError(f"rounds must be an integer >= 0, got {rounds!r}")
    if not (isinstance(max_depth, int | np.integer) and max_depth >= 1):
        raise ValueError(f"max_depth must be an integer >= 1, got {max_depth!r}")
    if not (math.isfinite(learning_rate) and 0 < learning_rate <= 1):
        raise ValueError(f"learning_rate must be in (0, 1], got {learning_rate}")
    loss = get_loss(loss, **(loss_params or {}))
    if isinstance(loss, Softmax):
        loss = loss.with_labels(y)
    X = _check_X(X)
    yv = loss.check_labels(y)
    if yv.shape[0] != X.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {yv.shape[0]} labels")
    obj = SchemeObjective(loss, yv, scheme=scheme, weight=sample_weight, M=M)
    base_score = _check_base_score(loss, yv, base_score)
    if backend == "native":
        require("sklearn.tree")
    model = train(
        backend,
        X,
        obj,
        base_score,
        int(rounds),
        float(learning_rate),
        int(max_depth),
        backend_params,
    )
    return BoostResult(model, loss, obj.history, backend, scheme, obj.stopped, obj.stop_reason)


_PARAM_NAMES = (
    "loss",
    "backend",
    "scheme",
    "n_estimators",
    "learning_rate",
    "max_depth",
    "M",
    "base_score",
    "loss_params",
    "backend_params",
)


class GRNBoostRegressor:
    """Sklearn-style regressor over :func:`fit` (``fit``/``predict``/``staged_predict``).

    Args:
        loss: ``"pseudo_huber"`` (default), ``"logcosh"``, ``"squared"``, ``"poisson"``.
        backend, scheme, M, max_depth, base_score, loss_params, backend_params: as in
            :func:`fit`.
        n_estimators: boosting rounds.
        learning_rate: shrinkage in ``(0, 1]`` (default 0.3).

    Attributes (after ``fit``):
        result_: the :class:`BoostResult`; ``evals_result_``: its history.
    """

    _default_loss = "pseudo_huber"

    def __init__(
        self,
        loss: str = "pseudo_huber",
        *,
        backend: str = "native",
        scheme: str = "grn",
        n_estimators: int = 100,
        learning_rate: float = 0.3,
        max_depth: int = 3,
        M: float | None = None,
        base_score: float | None = None,
        loss_params: dict | None = None,
        backend_params: dict | None = None,
    ):
        self.loss = loss
        self.backend = backend
        self.scheme = scheme
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.M = M
        self.base_score = base_score
        self.loss_params = loss_params
        self.backend_params = backend_params

    def get_params(self, deep: bool = True) -> dict:
        keys = _PARAM_NAMES
        return {k: getattr(self, k) for k in keys}

    def set_params(self, **params):
        for k, v in params.items():
            if k not in self.get_params():
                raise ValueError(f"unknown parameter {k!r}")
            setattr(self, k, v)
        return self

    def _fit(self, X, y, sample_weight):
        self.result_ = fit(
            X,
            y,
            self.loss,
            backend=self.backend,
            scheme=self.scheme,
            rounds=self.n_estimators,
            learning_rate=self.learning_rate,
            max_depth=self.max_depth,
            M=self.M,
            sample_weight=sample_weight,
            base_score=self.base_score,
            loss_params=self.loss_params,
            backend_params=self.backend_params,
        )
        self.evals_result_ = self.result_.history
        return self

    def fit(self, X, y, sample_weight=None):
        return self._fit(X, y, sample_weight)

    def _result(self) -> BoostResult:
        if not hasattr(self, "result_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted yet: call fit first")
        return self.result_

    def predict(self, X) -> np.ndarray:
        return self._result().predict(X)

    def staged_predict(self, X):
        return self._result().staged_predict(X)


class GRNBoostClassifier(GRNBoostRegressor):
    """Classifier: the logistic loss for two classes, softmax cross-entropy for more.

    ``classes_`` are the sorted labels seen in ``fit``; with more than two the loss is
    ``softmax`` (one tree per class and round, per-class diagonal Hessian plus the GRN shift;
    not on the ``catboost`` backend).
    """

    def __init__(self, loss: str = "logistic", **kwargs):
        super().__init__(loss, **kwargs)

    def fit(self, X, y, sample_weight=None):
        y = np.asarray(y)
        if y.ndim != 1:
            raise ValueError(f"y must be 1-d, got shape {y.shape}")
        if y.dtype.kind == "f":
            as_float_array(y, "labels")
        classes, index = np.unique(y, return_inverse=True)
        if classes.shape[0] < 2:
            raise ValueError(f"GRNBoostClassifier needs >= 2 classes, got {classes.shape[0]}")
        self.classes_ = classes
        loss = self.loss
        if classes.shape[0] > 2 or loss == "softmax":
            loss = Softmax(int(classes.shape[0]))
        saved, self.loss = self.loss, loss
        try:
            return self._fit(X, index.astype(np.float64), sample_weight)
        finally:
            self.loss = saved

    def _proba(self, p: np.ndarray) -> np.ndarray:
        return p if p.ndim == 2 else np.stack([1.0 - p, p], axis=1)

    def predict_proba(self, X) -> np.ndarray:
        return self._proba(self._result().predict(X))

    def predict(self, X) -> np.ndarray:
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def staged_predict_proba(self, X):
        for p in self._result().staged_predict(X):
            yield self._proba(p)

    def staged_predict(self, X):
        for p in self.staged_predict_proba(X):
            yield self.classes_[np.argmax(p, axis=1)]
