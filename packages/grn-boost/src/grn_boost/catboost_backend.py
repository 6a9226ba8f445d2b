r"""The schemes inside CatBoost: a chunked custom objective plus a metric that carries ``||g||``.

CatBoost calls a Python objective's ``calc_ders_range(approxes, targets, weights)`` on *blocks*
of rows (measured: blocks of 1000 for the split search, then 500 for the leaf values, with no
row indices), and expects CatBoost's sign convention: it *maximises*, so each row returns
``(der1, der2) = (-w l', -w l'')``, the derivatives of the negated loss. Every per-row quantity
of a scheme is local to its row except GRN's shift :math:`\lambda_k = \sqrt{M\|l'(F_k)\|_w}`,
which needs the functional gradient norm over the *whole* sample at the round's start margins.

How it is obtained. CatBoost evaluates its ``eval_metric`` on the full training set after
every iteration, at the new margins :math:`F_{k+1}` (baseline included), before the next
iteration's derivative calls (measured order: ders ..., metric, callback, ders ...). The metric
here, :class:`ShiftMetric`, accumulates :math:`\sum_i w_i l'(y_i, F_i)^2` (and, for a loss
without a global constant, :math:`\max_i |l'''|`) over its blocks and, in
``get_final_error``, sets the objective's :math:`\lambda_{k+1}`. :math:`\lambda_0` is computed
directly from the base score. A callback checks after each iteration that the metric ran once
for it (a stale shift is an error, not a silent approximation), and stops training once the
loss is not finite.

The per-round record (loss, gradient norm, shift, cosine, edge) is then *replayed*: the
staged training margins :math:`F_0, \dots, F_K` are fed to the same
:class:`~grn_boost.objectives.SchemeObjective` the other backends use, which recomputes every
shift from the full margins; the shifts CatBoost trained with are kept in ``lam_used`` and the
tests check that both routes agree.

CatBoost's CPU split search scores splits with its ``Cosine``/``L2`` score on the first
derivatives (its Newton scores are GPU-only); the leaf values are the scheme's exact
:math:`-\sum g / \sum a` (``leaf_estimation_method = Newton``, one iteration, no backtracking,
``l2_leaf_reg = 0``). The descent certificate of the README holds for any partition, so the
GRN guarantee is unaffected; the trees differ from XGBoost's and LightGBM's.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ._optional import require
from .newton import inner
from .objectives import SchemeObjective

__all__ = ["CatBoostModel", "CatBoostObjective", "ShiftMetric", "train_catboost"]


class CatBoostObjective:
    """``calc_ders_range`` of one scheme, with the current round's scalar shift ``lam``.

    Args:
        obj: the :class:`SchemeObjective` holding the loss, scheme, weights and ``M``.
        lam: the shift of the first round.

    Attributes:
        lam: the shift the next blocks use (set by :class:`ShiftMetric` each round).
        lam_used: the shift of every round trained so far.
    """

    def __init__(self, obj: SchemeObjective, lam: float):
        self.loss, self.scheme = obj.loss, obj.scheme
        self.lam = lam
        self.lam_used: list[float] = []
        self._fresh = True  # the next call opens a round

    def __deepcopy__(self, memo):
        # CatBoost deep-copies its params; the metric and the callback must reach this
        # very object (it carries the round's shift), so a copy is the object itself
        return self

    def derivatives(self, f: np.ndarray, y: np.ndarray, w: np.ndarray | None):
        """The scheme's ``(g, a)`` of a block (weighted), with the current ``lam``."""
        d1, d2 = self.loss.grad(y, f), self.loss.hess(y, f)
        a = {"grn": d2 + self.lam, "newton": d2, "gradient": np.ones_like(d2)}[self.scheme]
        return (d1, a) if w is None else (w * d1, w * a)

    def calc_ders_range(self, approxes, targets, weights):
        if self._fresh:
            self.lam_used.append(self.lam)
            self._fresh = False
        f = np.asarray(approxes, dtype=np.float64)
        y = np.asarray(targets, dtype=np.float64)
        w = None if weights is None else np.asarray(weights, dtype=np.float64)
        out = np.empty((f.shape[0], 2))
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            g, a = self.derivatives(f, y, w)
        if not (np.all(np.isfinite(g)) and np.all(np.isfinite(a))):
            # diverged: a no-op block (zero gradient); the callback stops the run
            out[:, 0], out[:, 1] = 0.0, -1.0
            return out
        # CatBoost maximises: the derivatives of the negated loss
        out[:, 0], out[:, 1] = -g, -a
        return out


class ShiftMetric:
    """CatBoost ``eval_metric``: reports the mean training loss and sets the next shift.

    Over the blocks of one evaluation it accumulates :math:`\\sum w l'^2` (and
    :math:`\\max |l'''|` when the loss has no global Hessian-Lipschitz constant and no ``M`` was
    given); ``get_final_error`` turns them into :math:`\\lambda = \\sqrt{M \\|l'\\|_w}` for the
    objective's next round.
    """

    def __init__(self, obj: SchemeObjective, target: CatBoostObjective, wmin: float):
        self.loss, self.target = obj.loss, target
        self.scale = 1.0 / math.sqrt(wmin)  # as in objectives.resolve_M
        glob = obj.loss.hessian_lipschitz
        self.M_fixed = obj.M if obj.M is not None else (None if glob is None else glob * self.scale)
        self.evaluations = 0
        self.finite = True
        self._reset()

    def __deepcopy__(self, memo):
        return self  # shared with the callback, as the objective is

    def _reset(self):
        self._g2, self._third, self._bad = 0.0, 0.0, False

    def is_max_optimal(self) -> bool:
        return False

    def evaluate(self, approxes, target, weight):
        f = np.asarray(approxes[0], dtype=np.float64)
        y = np.asarray(target, dtype=np.float64)
        w = np.ones_like(f) if weight is None else np.asarray(weight, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            v, d1, _ = self.loss.evaluate(y, f)
            self._g2 += inner(w * d1, d1)
            if self.M_fixed is None:
                self._third = max(self._third, float(np.max(np.abs(self.loss.third(y, f)))))
            total = inner(w, v)
        self._bad = self._bad or not math.isfinite(total)
        return total, float(np.sum(w))

    def get_final_error(self, error, weight):
        self.evaluations += 1
        self.finite = not self._bad and math.isfinite(self._g2)
        if self.target.scheme == "grn" and self.finite:
            m = self.M_fixed if self.M_fixed is not None else self._third * self.scale
            self.target.lam = math.sqrt(m * math.sqrt(self._g2))
        self.target._fresh = True
        self._reset()
        return error / weight if weight > 0 else math.nan


class _Guard:
    """``after_iteration`` callback: the metric ran once per iteration; stop when not finite."""

    def __init__(self, metric: ShiftMetric):
        self.metric = metric

    def after_iteration(self, info) -> bool:
        if self.metric.evaluations != info.iteration:
            raise RuntimeError(
                f"CatBoost evaluated the shift metric {self.metric.evaluations} times in "
                f"{info.iteration} iterations: GRN's shift would be stale"
            )
        return self.metric.finite


class CatBoostModel:
    """A trained ``catboost.CatBoost`` (or none for 0 rounds) plus the base score."""

    def __init__(self, booster, base_score: float, n_rounds: int):
        self.booster, self.base_score, self.n_rounds = booster, base_score, n_rounds

    def predict_margin(self, X, n_rounds: int | None = None) -> np.ndarray:
        n_rounds = self.n_rounds if n_rounds is None else n_rounds
        X = np.asarray(X, dtype=np.float64)
        if n_rounds == 0:
            return np.full(X.shape[0], self.base_score)
        out = self.booster.predict(X, prediction_type="RawFormulaVal", ntree_end=n_rounds)
        return self.base_score + np.asarray(out, dtype=np.float64)

    def staged_margins(self, X):
        """Margins after 0, 1, ..., ``n_rounds`` rounds (a generator)."""
        X = np.asarray(X, dtype=np.float64)
        yield np.full(X.shape[0], self.base_score)
        if self.n_rounds == 0:
            return
        staged = self.booster.staged_predict(X, prediction_type="RawFormulaVal")
        for k, out in enumerate(staged):
            if k >= self.n_rounds:
                break
            yield self.base_score + np.asarray(out, dtype=np.float64)


def train_catboost(X, obj: SchemeObjective, base_score, rounds, learning_rate, max_depth, params):
    """Boost with ``catboost.CatBoost`` and the scheme's chunked objective, then replay."""
    if obj.loss.n_outputs > 1:
        # CatBoost's multi-output objective is called once per row from Python (its
        # calc_ders_multi): not a vectorised objective; not offered
        raise ValueError("the catboost backend is single-output: use native/xgboost/lightgbm")
    cb = require("catboost")
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    f0 = np.full(n, base_score)
    # round 0's shift from the start margins (the metric sets the later ones)
    probe = SchemeObjective(obj.loss, obj.y, scheme=obj.scheme, weight=obj.weight, M=obj.M)
    probe(f0)
    target = CatBoostObjective(obj, probe.history["reg"][0])
    wmin = 1.0 if obj.weight is None else float(np.min(obj.weight[obj.weight > 0]))
    metric = ShiftMetric(obj, target, wmin)
    booster = None
    if rounds > 0:
        p = {
            "loss_function": target,
            "eval_metric": metric,
            "metric_period": 1,
            "iterations": rounds,
            "learning_rate": learning_rate,
            "depth": max_depth,
            "l2_leaf_reg": 0.0,
            "leaf_estimation_method": "Newton",
            "leaf_estimation_iterations": 1,
            "leaf_estimation_backtracking": "No",
            "boosting_type": "Plain",
            "bootstrap_type": "No",
            "random_strength": 0.0,
            "score_function": "L2",
            "thread_count": 1,
            "random_seed": 0,
            "allow_writing_files": False,
            "verbose": 0,
            **params,
        }
        pool = cb.Pool(X, label=obj.y, weight=obj.weight, baseline=f0)
        booster = cb.CatBoost(p)
        with warnings.catch_warnings():
            # catboost suggests numba for Python objectives; the objective is vectorised
            warnings.filterwarnings("ignore", message=".*numba.*")
            try:
                booster.fit(pool, callbacks=[_Guard(metric)])
            except cb.CatBoostError as err:
                obj.abort(f"CatBoost aborted: {err}")
                return CatBoostModel(None, base_score, 0)
    model = CatBoostModel(booster, base_score, 0 if booster is None else booster.tree_count_)
    model.lam_used = target.lam_used[: model.n_rounds]
    # replay the record on the staged training margins (the same objective as the others)
    margins = list(model.staged_margins(X))
    for f in margins[:-1]:
        obj(f)
    if not metric.finite and not obj.stopped:
        obj(margins[-1])  # the last tree made the loss non-finite: record it and stop
    obj.finish(margins[-1])
    return model
