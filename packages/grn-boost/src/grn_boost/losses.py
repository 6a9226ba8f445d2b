r"""Per-sample losses ``l(y, F)`` of a margin ``F``, with their first three derivatives in ``F``.

Every loss is a pure, vectorised numpy function of the labels ``y`` and the raw scores ``F``
(the booster's margin, before any link). The boosting objective is the weighted sum
:math:`R(F) = \sum_i w_i\, l(y_i, F_i)`; its gradient and Hessian at the training sample are the
per-sample vectors :math:`g_i = w_i\, l'(y_i, F_i)` and :math:`h_i = w_i\, l''(y_i, F_i)`.

The gradient-regularised Newton step needs the Lipschitz constant of the Hessian,
:math:`\sup |l'''|` (``hessian_lipschitz``). It is known in closed form for

==============  =====================================  =========================================
loss            :math:`l(y, F)`, :math:`r = F - y`     :math:`\sup_F |l'''|`
==============  =====================================  =========================================
squared         :math:`r^2/2`                          0
pseudo_huber    :math:`\delta^2(\sqrt{1+(r/\delta)^2}-1)` :math:`\tfrac{3}{2}(4/5)^{5/2}/\delta`
                                                       (at :math:`|r| = \delta/2`)
logcosh         :math:`\log\cosh r`                    :math:`4/(3\sqrt3)` (at
                                                       :math:`\tanh r = 1/\sqrt3`)
squared_logcosh :math:`r^2/2 + \log\cosh r`            :math:`4/(3\sqrt3)` (Hessian in [1, 2])
logistic        :math:`\log(1+e^F) - yF`, y in {0,1}   :math:`1/(6\sqrt3)` (at
                                                       :math:`p = 1/2 \pm 1/(2\sqrt3)`)
poisson         :math:`e^F - yF`, y >= 0               unbounded (:math:`l''' = e^F`): ``None``,
                                                       estimated at the iterate
softmax         :math:`\log\sum_k e^{F_k} - F_y`,      :math:`1/\sqrt2` (proved bound; the
                :math:`F \in \mathbb{R}^K`             brute-force sup is :math:`\sqrt6/9`)
==============  =====================================  =========================================

``softmax`` is the one multi-output loss (``n_outputs = K``): margins are ``(n, K)``, ``grad``
is ``p - e_y`` and ``hess`` returns the *diagonal* ``p (1 - p)`` that per-class trees use (the
full Hessian ``diag(p) - p p^T`` is at most twice that diagonal; see :class:`Softmax`).

Example:
    >>> import numpy as np
    >>> loss = get_loss("pseudo_huber", delta=1.0)
    >>> y, f = np.array([0.0, 3.0]), np.array([1.0, 0.0])
    >>> np.round(loss.grad(y, f), 4)
    array([ 0.7071, -0.9487])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "LOSSES",
    "LogCosh",
    "Logistic",
    "Loss",
    "Poisson",
    "PseudoHuber",
    "Softmax",
    "Squared",
    "SquaredLogCosh",
    "as_float_array",
    "get_loss",
]


def as_float_array(a, name: str, ndim: int = 1) -> np.ndarray:
    """``a`` as a float64 array of ``ndim`` dimensions, all finite; ``ValueError`` otherwise."""
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr.ravel()))[0])
        raise ValueError(f"{name} has a non-finite entry (flat index {bad}: {arr.ravel()[bad]})")
    return arr


class Loss:
    """A twice-differentiable convex per-sample loss of the margin ``F``.

    Subclasses give ``value``, ``grad``, ``hess``, ``third`` (the derivatives in ``F``),
    ``hessian_lipschitz`` (``sup_F |l'''|``, or ``None`` when unbounded), ``init_score`` (the
    best constant margin) and ``check_labels``.
    """

    name: str = "loss"
    hessian_lipschitz: float | None = None
    #: margins per sample: 1 (a vector ``F``) or ``K`` (an ``(n, K)`` array; ``softmax``)
    n_outputs: int = 1

    def value(self, y: np.ndarray, f: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def grad(self, y: np.ndarray, f: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def hess(self, y: np.ndarray, f: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def third(self, y: np.ndarray, f: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def init_score(self, y: np.ndarray) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def evaluate(self, y: np.ndarray, f: np.ndarray):
        """``(value, grad, hess)`` at once (subclasses share their intermediate terms)."""
        return self.value(y, f), self.grad(y, f), self.hess(y, f)

    def check_labels(self, y) -> np.ndarray:
        """Labels as a finite float64 vector (subclasses add their range checks)."""
        return as_float_array(y, "labels")

    def local_hessian_lipschitz(self, y: np.ndarray, f: np.ndarray) -> float:
        """The Hessian's Lipschitz constant to use at ``f``: the global one when known.

        For a loss without a global constant (Poisson) this is the estimate
        ``max_i |l'''(y_i, f_i)|`` at the current iterate: a local value, not a guarantee.
        """
        if self.hessian_lipschitz is not None:
            return self.hessian_lipschitz
        return float(np.max(np.abs(self.third(y, f))))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Squared(Loss):
    """``l = (F - y)^2 / 2``: constant Hessian 1, so every scheme is plain boosting."""

    name = "squared"
    hessian_lipschitz = 0.0

    def value(self, y, f):
        return 0.5 * (f - y) ** 2

    def grad(self, y, f):
        return f - y

    def hess(self, y, f):
        return np.ones_like(f)

    def third(self, y, f):
        return np.zeros_like(f)

    def init_score(self, y):
        return float(np.mean(y))


@dataclass(frozen=True, repr=True)
class PseudoHuber(Loss):
    """``l = delta^2 (sqrt(1 + (r/delta)^2) - 1)``, ``r = F - y``: quadratic near 0, linear far.

    Its Hessian ``(1 + (r/delta)^2)^(-3/2)`` vanishes like ``|r|^-3``, which is what makes
    vanilla Newton boosting overshoot on large residuals.
    """

    delta: float = 1.0
    name = "pseudo_huber"

    def __post_init__(self):
        if not (math.isfinite(self.delta) and self.delta > 0):
            raise ValueError(f"pseudo_huber needs delta > 0, got {self.delta}")

    @property
    def hessian_lipschitz(self) -> float:  # type: ignore[override]
        return 1.5 * 0.8**2.5 / self.delta

    def _s(self, y, f):
        t = (f - y) / self.delta
        if np.max(np.abs(t), initial=0.0) < 1e150:
            return t, np.sqrt(1.0 + t * t)
        return t, np.hypot(1.0, t)  # sqrt(1 + t^2) without overflow

    def _value(self, t, s):
        # delta^2 (s - 1) = delta^2 t^2 / (s + 1): no cancellation near 0, no overflow far out
        return self.delta**2 * (t * (t / (s + 1.0)))

    def value(self, y, f):
        return self._value(*self._s(y, f))

    def grad(self, y, f):
        t, s = self._s(y, f)
        return self.delta * t / s

    def hess(self, y, f):
        _, s = self._s(y, f)
        return 1.0 / (s * s * s)

    def evaluate(self, y, f):
        # the objective's hot path (every round, every row): the same arithmetic as value /
        # grad / hess, in place, with one overflow check (a max) instead of two passes
        t = f - y
        if self.delta != 1.0:
            t /= self.delta
        with np.errstate(over="ignore"):
            s = t * t
        s += 1.0
        np.sqrt(s, out=s)
        if not np.isfinite(s.max(initial=0.0)):  # t^2 overflowed: sqrt(1 + t^2) by hypot
            s = np.hypot(1.0, t)
        r = 1.0 / s
        v = s + 1.0
        np.divide(t, v, out=v)
        v *= t
        if self.delta != 1.0:
            v *= self.delta**2
        g = t * r if self.delta == 1.0 else (self.delta * t) * r
        h = r * r
        h *= r
        return v, g, h

    def third(self, y, f):
        t, s = self._s(y, f)
        return -3.0 * t / self.delta * s**-5

    def init_score(self, y):
        return float(np.median(y))


class LogCosh(Loss):
    """``l = log cosh(F - y)``: ``l' = tanh r``, ``l'' = 1 - tanh^2 r``."""

    name = "logcosh"
    hessian_lipschitz = 4.0 / (3.0 * math.sqrt(3.0))

    def value(self, y, f):
        r = np.abs(f - y)
        return r + np.log1p(np.exp(-2.0 * r)) - math.log(2.0)

    def grad(self, y, f):
        return np.tanh(f - y)

    @staticmethod
    def _sech2(r):
        e = np.exp(-2.0 * np.abs(r))  # sech^2 r = 4 e^{-2|r|} / (1 + e^{-2|r|})^2, no cancellation
        return 4.0 * e / (1.0 + e) ** 2

    def hess(self, y, f):
        return self._sech2(f - y)

    def third(self, y, f):
        r = f - y
        return -2.0 * np.tanh(r) * self._sech2(r)

    def init_score(self, y):
        return float(np.median(y))


class SquaredLogCosh(Loss):
    """``l = (F - y)^2 / 2 + log cosh(F - y)``: Hessian in ``[1, 2]``, so Hessian-dominated.

    The curvature at any two points differs by at most a factor 2: the condition under which
    vanilla Newton boosting converges linearly. Its third derivative is log-cosh's.
    """

    name = "squared_logcosh"
    hessian_lipschitz = 4.0 / (3.0 * math.sqrt(3.0))

    def value(self, y, f):
        return 0.5 * (f - y) ** 2 + LogCosh().value(y, f)

    def grad(self, y, f):
        return (f - y) + np.tanh(f - y)

    def hess(self, y, f):
        return 1.0 + LogCosh._sech2(f - y)

    def third(self, y, f):
        return LogCosh().third(y, f)

    def init_score(self, y):
        return float(np.median(y))


def _sigmoid(f):
    return 0.5 * (1.0 + np.tanh(0.5 * f))


class Logistic(Loss):
    """Binary cross-entropy on the logit ``F``, labels in ``{0, 1}`` (or soft labels in [0, 1])."""

    name = "logistic"
    hessian_lipschitz = 1.0 / (6.0 * math.sqrt(3.0))

    def check_labels(self, y):
        y = as_float_array(y, "labels")
        if np.any((y < 0) | (y > 1)):
            raise ValueError(
                f"logistic loss needs labels in [0, 1], got range [{y.min()}, {y.max()}]"
            )
        return y

    def value(self, y, f):
        return np.logaddexp(0.0, f) - y * f

    def grad(self, y, f):
        return _sigmoid(f) - y

    def hess(self, y, f):
        p = _sigmoid(f)
        return p * (1.0 - p)

    def third(self, y, f):
        p = _sigmoid(f)
        return p * (1.0 - p) * (1.0 - 2.0 * p)

    def init_score(self, y):
        p = float(np.clip(np.mean(y), 1e-12, 1 - 1e-12))
        return math.log(p / (1 - p))


class Poisson(Loss):
    """Poisson deviance with log link, ``l = e^F - y F`` (up to a constant in ``y``), ``y >= 0``.

    ``l''' = e^F`` is unbounded: there is no global Hessian-Lipschitz constant
    (``hessian_lipschitz = None``); the GRN scheme then uses the local estimate of
    :meth:`Loss.local_hessian_lipschitz`.
    """

    name = "poisson"
    hessian_lipschitz = None

    def check_labels(self, y):
        y = as_float_array(y, "labels")
        if np.any(y < 0):
            raise ValueError(f"poisson loss needs labels >= 0, got a minimum of {y.min()}")
        return y

    def value(self, y, f):
        return np.exp(f) - y * f

    def grad(self, y, f):
        return np.exp(f) - y

    def hess(self, y, f):
        return np.exp(f)

    def third(self, y, f):
        return np.exp(f)

    def init_score(self, y):
        m = float(np.mean(y))
        if m <= 0:
            raise ValueError("poisson loss needs at least one positive label")
        return math.log(m)


@dataclass(frozen=True, repr=True)
class Softmax(Loss):
    r"""Multiclass cross-entropy on ``K`` logits, ``l = logsumexp(F) - F_y``, labels ``0..K-1``.

    Derivatives, with :math:`p = \mathrm{softmax}(F)`: :math:`\nabla l = p - e_y`,
    :math:`\nabla^2 l = \mathrm{diag}(p) - pp^\top` (:meth:`hess_quadratic`), and the third
    directional derivative along a unit :math:`u` is the third central moment
    :math:`E_p[(u - E_p u)^3]` of ``u`` under ``p``. ``hess`` returns the diagonal
    :math:`D = \mathrm{diag}(p(1-p))` that one tree per class uses, and
    :math:`\nabla^2 l \preceq 2D` because
    :math:`\mathrm{Var}_p(v) = \tfrac12\sum_{j,k} p_jp_k(v_j-v_k)^2
    \le \sum_{j \ne k} p_jp_k(v_j^2+v_k^2) = 2\sum_j p_j(1-p_j)v_j^2`.

    Hessian-Lipschitz constant (Euclidean norm on :math:`\mathbb{R}^K`): with
    :math:`v = u - E_p u`, :math:`|E_p v^3| \le \max_k|v_k|\,\mathrm{Var}_p(u)`; the range
    :math:`r = \max u - \min u \le \sqrt2\,\|u\|_2` bounds :math:`\max_k |v_k| \le r` and
    :math:`\mathrm{Var}_p(u) \le r^2/4`, so :math:`|E_p v^3| \le r^3/4 \le 1/\sqrt2`. A
    brute-force search (tests) finds the sup :math:`\sqrt6/9 \approx 0.272` (the two-class
    logistic value along :math:`u = (e_1 - e_2)/\sqrt2`) for ``K`` up to 5; the default is the
    proved bound, ``M=`` overrides it.

    Args:
        n_classes: ``K >= 2``; ``None``: set from the labels by :meth:`with_labels`.
    """

    n_classes: int | None = None
    name = "softmax"
    hessian_lipschitz = 1.0 / math.sqrt(2.0)

    def __post_init__(self):
        K = self.n_classes
        if K is not None and not (isinstance(K, int | np.integer) and K >= 2):
            raise ValueError(f"softmax needs n_classes >= 2, got {K!r}")

    @property
    def n_outputs(self) -> int:  # type: ignore[override]
        if self.n_classes is None:
            raise ValueError("softmax: n_classes is unknown until labels are seen")
        return int(self.n_classes)

    def with_labels(self, y) -> Softmax:
        """This loss with ``n_classes`` set from the labels (``max + 1``) when it was ``None``."""
        if self.n_classes is not None:
            return self
        y = as_float_array(y, "labels")
        return Softmax(max(2, int(np.max(y)) + 1))

    def check_labels(self, y):
        y = as_float_array(y, "labels")
        K = self.n_outputs
        if np.any((y < 0) | (y >= K) | (y != np.round(y))):
            raise ValueError(f"softmax loss needs integer labels in [0, {K}), got {y[:5]}")
        return y

    @staticmethod
    def _parts(f):
        z = f - np.max(f, axis=1, keepdims=True)  # shifted: no overflow
        e = np.exp(z)
        s = np.sum(e, axis=1, keepdims=True)
        return z, e / s, np.log(s[:, 0])

    @staticmethod
    def _index(y, f):
        return np.arange(f.shape[0]), y.astype(np.intp)

    def value(self, y, f):
        z, _, lse = self._parts(f)
        return lse - z[self._index(y, f)]

    def grad(self, y, f):
        return self.evaluate(y, f)[1]

    def hess(self, y, f):
        p = self._parts(f)[1]
        return p * (1.0 - p)

    def evaluate(self, y, f):
        z, p, lse = self._parts(f)
        idx = self._index(y, f)
        g = p.copy()
        g[idx] -= 1.0
        return lse - z[idx], g, p * (1.0 - p)

    def hess_quadratic(self, y, f, d) -> np.ndarray:
        r"""Per sample :math:`d_i^\top \nabla^2 l_i\, d_i = \mathrm{Var}_{p_i}(d_i)` (full H)."""
        p = self._parts(f)[1]
        m = np.sum(p * d, axis=1)
        return np.sum(p * d * d, axis=1) - m * m

    def third(self, y, f):
        raise NotImplementedError("softmax: the third derivative is a tensor (see the docstring)")

    def init_score(self, y):
        counts = np.bincount(y.astype(np.intp), minlength=self.n_outputs).astype(np.float64)
        logp = np.log(np.maximum(counts / counts.sum(), 1e-12))
        return logp - logp.mean()


LOSSES: dict[str, type[Loss]] = {
    "squared": Squared,
    "squared_logcosh": SquaredLogCosh,
    "pseudo_huber": PseudoHuber,
    "logcosh": LogCosh,
    "logistic": Logistic,
    "poisson": Poisson,
    "softmax": Softmax,
}


def get_loss(loss: str | Loss, **params) -> Loss:
    """A loss instance from its name (``LOSSES``' keys) and parameters, or ``loss`` itself.

    Raises:
        ValueError: for an unknown name, or parameters the loss does not take.
    """
    if isinstance(loss, Loss):
        if params:
            raise ValueError(f"loss parameters {sorted(params)} given with a Loss instance")
        return loss
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; known: {sorted(LOSSES)}")
    try:
        return LOSSES[loss](**params)
    except TypeError as err:
        raise ValueError(f"loss {loss!r} does not take parameters {sorted(params)}") from err
