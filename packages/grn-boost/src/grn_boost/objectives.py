r"""Custom objectives carrying the GRN step into XGBoost and LightGBM, with per-round diagnostics.

A backend grows each tree from per-sample ``(grad, hess)`` pairs and sets the leaf values to
:math:`-\sum g / (\sum \mathrm{hess} + \texttt{reg\_lambda})`. Handing it the *shifted*
Hessian :math:`h_i + \lambda_k` (with ``reg_lambda = 0``) makes its leaf values exactly
:math:`-G_j/(H_j + n_j\lambda_k)` and its split gains those of the regularised model: the GRN
step, with no change to the backend. (XGBoost's ``reg_lambda`` is different: one
:math:`\lambda` per *leaf*, not per sample, and not adaptive.)

:class:`SchemeObjective` is the one stateful callable that all three backends share: it turns
margins into ``(g, a)`` (:func:`grad_hess`) and, from the margins it sees at the next call,
recovers the tree just added, :math:`\eta f_k = F_{k+1} - F_k`, and records the diagnostics of
:mod:`grn_boost.newton` for round :math:`k`.

Example:
    >>> import numpy as np
    >>> from grn_boost.losses import get_loss
    >>> obj = SchemeObjective(get_loss("logcosh"), np.array([0.0, 2.0]), scheme="grn")
    >>> g, a = obj(np.zeros(2))
    >>> bool(np.all(a > obj.loss.hess(obj.y, np.zeros(2))))
    True
"""

from __future__ import annotations

import math

import numpy as np

from .losses import Loss, as_float_array
from .newton import (
    SCHEMES,
    cosine_angle,
    gradient_edge,
    grn_regulariser,
    inner,
    modified_hessian,
)

__all__ = [
    "HISTORY_KEYS",
    "SchemeObjective",
    "as_columns",
    "check_weight",
    "grad_hess",
    "lightgbm_objective",
    "resolve_M",
    "xgboost_objective",
]

#: per-round records: ``loss`` has ``rounds + 1`` entries (before round 1 .. after the last),
#: the others one per round (measured at the round's start margins and its fitted tree):
#: ``grad_norm`` (the functional gradient's norm in L2(w)), ``reg`` (the shift lambda),
#: ``M`` (the Hessian-Lipschitz constant used), ``cosine`` and ``edge`` of the tree.
HISTORY_KEYS = ("loss", "grad_norm", "reg", "M", "cosine", "edge")


def check_weight(weight, n: int) -> np.ndarray | None:
    """Sample weights as a float64 vector of length ``n``, finite and ``>= 0``, or ``None``."""
    if weight is None:
        return None
    w = as_float_array(weight, "sample_weight")
    if w.shape[0] != n:
        raise ValueError(f"sample_weight has {w.shape[0]} entries but there are {n} samples")
    if np.any(w < 0) or not np.any(w > 0):
        raise ValueError("sample_weight must be >= 0 with at least one positive entry")
    return w


def resolve_M(loss: Loss, y: np.ndarray, f: np.ndarray, M: float | None, weight) -> float:
    r"""The Hessian-Lipschitz constant of :math:`R` in :math:`L^2(w)`: ``M`` or the loss's own.

    Given ``M`` it must be finite and ``> 0`` and is used as is. Without it:
    ``loss.local_hessian_lipschitz`` (the global :math:`\sup|l'''|` when known, else the
    estimate at ``f``) divided by :math:`\sqrt{\min_{w_i > 0} w_i}`, because
    :math:`\|u\|_\infty \le \|u\|_w / \sqrt{\min w}` (1 without weights).
    """
    if M is not None:
        if not (isinstance(M, int | float) and math.isfinite(M) and M > 0):
            raise ValueError(f"M must be a finite number > 0, got {M!r}")
        return float(M)
    wmin = 1.0 if weight is None else float(np.min(weight[weight > 0]))
    return loss.local_hessian_lipschitz(y, f) / math.sqrt(wmin)


def grad_hess(
    loss: Loss,
    y: np.ndarray,
    f: np.ndarray,
    *,
    scheme: str = "grn",
    weight: np.ndarray | None = None,
    M: float | None = None,
    derivatives: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, float, float]:
    r"""The ``(grad, hess)`` a backend needs for one round of the scheme, at margins ``f``.

    The space is :math:`L^2(w)` on the training sample, :math:`\langle u, v\rangle_w =
    \sum_i w_i u_i v_i` (Euclidean without weights), in which the functional gradient is
    :math:`l'_i` and the Hessian multiplies by :math:`l''_i`. The GRN shift is
    :math:`\lambda = \sqrt{M \|l'\|_w}` and the step minimises
    :math:`\sum_i w_i (l'_i f_i + \tfrac12 (l''_i + \lambda) f_i^2)` over the tree, so the
    backend receives :math:`g_i = w_i l'_i` and :math:`a_i = w_i (l''_i + \lambda)`
    (``newton``: :math:`w_i l''_i`; ``gradient``: :math:`w_i`). Integer weights are then
    exactly repeated rows, and scaling all weights by :math:`c` changes neither
    :math:`\lambda` nor the step.

    ``derivatives``: ``(l', l'')`` at ``f`` when the caller has them already.

    Returns:
        ``(g, a, lam, M_used)``: the weighted gradient, the scheme's weighted curvature, the
        shift (0 unless ``grn``) and the constant used (0 unless ``grn``).
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; known: {list(SCHEMES)}")
    d1, d2 = (loss.grad(y, f), loss.hess(y, f)) if derivatives is None else derivatives
    m = resolve_M(loss, y, f, M, weight) if scheme == "grn" else 0.0
    if weight is None:
        a, lam = modified_hessian(d1, d2, scheme, m)
        return d1, a, lam, m
    wb = as_columns(weight, d1)
    lam = grn_regulariser(np.sqrt(wb) * d1, m) if scheme == "grn" else 0.0
    a = wb * {"grn": d2 + lam, "newton": d2, "gradient": np.ones_like(d2)}[scheme]
    return wb * d1, a, lam, m


def as_columns(weight: np.ndarray, like: np.ndarray) -> np.ndarray:
    """Per-sample ``weight`` shaped to broadcast against ``like`` (``(n,)`` or ``(n, K)``)."""
    return weight if like.ndim == 1 else weight[:, None]


class SchemeObjective:
    """Stateful objective: ``obj(margins) -> (g, a)``, recording one history row per round.

    Args:
        loss: the loss.
        y: labels (checked by ``loss.check_labels``).
        scheme: ``"grn"``, ``"newton"`` or ``"gradient"``.
        weight: optional sample weights.
        M: optional Hessian-Lipschitz constant (``> 0``), default the loss's.

    Attributes:
        history: dict of lists keyed by ``HISTORY_KEYS``.
        stopped: set once the loss (or a margin) is not finite, or the backend aborted.
        stop_reason: why it stopped, or ``None``.
    """

    def __init__(self, loss: Loss, y, *, scheme: str = "grn", weight=None, M=None):
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}; known: {list(SCHEMES)}")
        if hasattr(loss, "with_labels"):  # softmax without n_classes: from the labels
            loss = loss.with_labels(y)
        self.loss = loss
        self.y = loss.check_labels(y)
        self.weight = check_weight(weight, self.y.shape[0])
        if M is not None:
            resolve_M(loss, self.y, self.y, M, None)  # validates M
        self.scheme, self.M = scheme, M
        self.history: dict[str, list[float]] = {k: [] for k in HISTORY_KEYS}
        self._last: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.stopped = False
        self.stop_reason: str | None = None

    def total_loss(self, f: np.ndarray, values: np.ndarray | None = None) -> float:
        """Weighted mean training loss at margins ``f`` (or of the given per-sample values)."""
        v = self.loss.value(self.y, f) if values is None else values
        if self.weight is None:
            return float(np.mean(v))
        return inner(self.weight, v) / float(np.sum(self.weight))

    def _unweighted(self, g: np.ndarray) -> np.ndarray:
        if self.weight is None:
            return g
        w = as_columns(self.weight, g)
        pos = w > 0
        return np.where(pos, g / np.where(pos, w, 1.0), 0.0)

    def _close_round(self, f_next: np.ndarray, values: np.ndarray | None = None) -> None:
        f_prev, g, a = self._last
        step = f_next - f_prev
        # the diagnostics are inner products over all (sample, class) entries: flatten
        w = None if self.weight is None else np.broadcast_to(as_columns(self.weight, g), g.shape)
        self.history["cosine"].append(cosine_angle(g.ravel(), a.ravel(), step.ravel()))
        self.history["edge"].append(
            gradient_edge(
                self._unweighted(g).ravel(), step.ravel(), None if w is None else w.ravel()
            )
        )
        self.history["loss"].append(self.total_loss(f_next, values))
        self._last = None

    def __call__(self, f) -> tuple[np.ndarray, np.ndarray]:
        # a diverging run overflows on purpose; its record says so (inf / nan), not a warning
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return self._call(f)

    def _call(self, f) -> tuple[np.ndarray, np.ndarray]:
        # a copy: LightGBM hands over its score buffer and updates it in place
        f = np.array(f, dtype=np.float64, copy=True)
        n, K = self.y.shape[0], self.loss.n_outputs
        if f.size != n * K:
            raise ValueError(f"got {f.size} margins for {n} labels x {K} outputs")
        f = f.reshape(n) if K == 1 else f.reshape(n, K)
        v, d1, d2 = self.loss.evaluate(self.y, f)
        if self._last is not None:
            self._close_round(f, v)
        elif not self.history["loss"]:
            self.history["loss"].append(self.total_loss(f, v))
        if self.stopped or not math.isfinite(self.history["loss"][-1]):
            # diverged: hand the backend a no-op round (zero gradient) and stop recording
            self.stopped = True
            self.stop_reason = self.stop_reason or "non-finite training loss"
            return np.zeros_like(f), np.ones_like(f)
        g, a, lam, m = grad_hess(
            self.loss,
            self.y,
            f,
            scheme=self.scheme,
            weight=self.weight,
            M=self.M,
            derivatives=(d1, d2),
        )
        wd1 = d1 if self.weight is None else as_columns(self.weight, d1) * d1
        self.history["grad_norm"].append(math.sqrt(inner(wd1, d1)))
        self.history["reg"].append(lam)
        self.history["M"].append(m)
        self._last = (f, g, a)
        return g, a

    def abort(self, reason: str) -> None:
        """The backend refused the round just opened: drop it, stop, and keep ``reason``."""
        if self._last is not None:
            for k in ("grad_norm", "reg", "M"):
                self.history[k].pop()
            self._last = None
        self.stopped = True
        self.stop_reason = reason

    def finish(self, f_final) -> dict[str, list[float]]:
        """Close the last round with the final training margins; returns ``history``."""
        if self._last is not None:
            f = np.asarray(f_final, dtype=np.float64).reshape(self._last[0].shape)
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                self._close_round(f)
        return self.history


def xgboost_objective(obj: SchemeObjective):
    """``obj`` as an XGBoost custom objective ``(preds, dtrain) -> (grad, hess)``."""

    def objective(preds, dtrain):
        return obj(preds)

    return objective


def lightgbm_objective(obj: SchemeObjective):
    """``obj`` as a LightGBM callable objective ``(preds, dataset) -> (grad, hess)``."""

    def objective(preds, dataset):
        return obj(preds)

    return objective
