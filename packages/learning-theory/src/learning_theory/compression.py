r"""Sample compression schemes, a checker, and the compression-to-learner conversion.

A *sample compression scheme* of size :math:`k` with side-information set :math:`B` for a concept
class :math:`\mathcal C` is a pair of maps

.. math::

    \kappa: S = ((x_1, y_1), \dots, (x_m, y_m)) \mapsto (I, b),\quad I \subseteq [m],\ |I| \le k,\
    b \in B, \qquad \rho: ((x_i, y_i)_{i \in I}, b) \mapsto h,

such that for every sample :math:`S` realizable by :math:`\mathcal C` the reconstruction
:math:`h = \rho(S_I, b)` labels every point of :math:`S` correctly. The reconstruction sees only
the kept labelled points (in sample order) and :math:`b`, never the indices or the other points.

Schemes here (``size`` is :math:`k`, ``n_side`` is :math:`|B|`):

=====================================  ==========================  ======  =========
class                                  kept points                 k       |B|
=====================================  ==========================  ======  =========
thresholds :math:`1[x \ge t]`          smallest positive           1       1
intervals :math:`1[a \le x \le b]`     extreme positives           2       1
axis-aligned boxes in R^d              extreme positives per axis  2d      1
unions of <= s intervals               run endpoints               2s      2^(2s)
halfplanes :math:`1[w\cdot x > c]`     max-margin support set      3       1
=====================================  ==========================  ======  =========

The generalization bound of the conversion is in :mod:`learning_theory.bounds`.

Example:
    >>> import numpy as np
    >>> x = np.array([0.3, 0.9, 0.5, 0.1]); y = np.array([1, 0, 1, 0])
    >>> s = IntervalScheme(); c = s.compress(x, y)
    >>> c.indices
    (0, 2)
    >>> h = s.reconstruct(x[list(c.indices)], y[list(c.indices)], c.side)
    >>> h(x).tolist()
    [1, 0, 1, 0]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "BoxScheme",
    "CheckReport",
    "Compressed",
    "CompressionLearner",
    "CompressionScheme",
    "HalfplaneScheme",
    "Hypothesis",
    "IntervalScheme",
    "ThresholdScheme",
    "UnionOfIntervalsScheme",
    "check_scheme",
    "max_margin_halfplane",
]

Hypothesis = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Compressed:
    """The output of a compression map: kept indices (increasing) and side information."""

    indices: tuple[int, ...]
    side: int = 0


def _as_sample(x, y, dim: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Validate a labelled sample: ``x`` shape (m,) for ``dim=None`` or (m, dim); y in {0, 1}."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y)
    if dim is None:
        if x.ndim != 1:
            raise ValueError(f"expected 1-D points of shape (m,), got shape {x.shape}")
    elif x.ndim != 2 or x.shape[1] != dim:
        raise ValueError(f"expected points of shape (m, {dim}), got shape {x.shape}")
    if y.shape != (x.shape[0],):
        raise ValueError(f"labels must have shape ({x.shape[0]},), got {y.shape}")
    if y.size and not np.isin(y, (0, 1)).all():
        raise ValueError(f"labels must be 0 or 1, got values {sorted(set(y.tolist()))}")
    if not np.isfinite(x).all():
        raise ValueError("points must be finite (found NaN or inf)")
    return x, y.astype(np.int64)


def _const(value: int) -> Hypothesis:
    def h(x: np.ndarray) -> np.ndarray:
        return np.full(np.asarray(x).shape[0], value, dtype=np.int64)

    return h


class CompressionScheme(ABC):
    """A sample compression scheme: ``compress`` then ``reconstruct``.

    Attributes:
        size: the largest number of kept points :math:`k`.
        n_side: the number of side-information values :math:`|B|` (1 means none).
        dim: point dimension (``None`` for scalar points of shape (m,)).
        positive_witness: whether ``compress`` keeps at least one positive point whenever the
            sample has one (used by :mod:`learning_theory.high_arity`'s product schemes).
    """

    size: int
    n_side: int = 1
    dim: int | None = None
    positive_witness: bool = True
    name: str = "scheme"

    def realizable(self, x: np.ndarray, y: np.ndarray) -> bool:
        """Whether some concept of the class labels the sample ``(x, y)`` exactly."""
        x, y = _as_sample(x, y, self.dim)
        return self._realizable(x, y)

    def compress(self, x, y) -> Compressed:
        """Compress a realizable sample; raise ``ValueError`` if it is not realizable."""
        x, y = _as_sample(x, y, self.dim)
        if not self._realizable(x, y):
            raise ValueError(f"{self.name}: the sample is not realizable by the class")
        return self._compress(x, y)

    def reconstruct(self, x, y, side: int = 0) -> Hypothesis:
        """The hypothesis rebuilt from the kept labelled points and the side information."""
        x, y = _as_sample(x, y, self.dim)
        if not 0 <= int(side) < self.n_side:
            raise ValueError(f"{self.name}: side information {side} not in range({self.n_side})")
        return self._reconstruct(x, y, int(side))

    def learn(self, x, y) -> Hypothesis:
        """compress then reconstruct: the learner of the Littlestone–Warmuth conversion."""
        x, y = _as_sample(x, y, self.dim)
        c = self.compress(x, y)
        idx = list(c.indices)
        return self.reconstruct(x[idx], y[idx], c.side)

    @abstractmethod
    def _realizable(self, x: np.ndarray, y: np.ndarray) -> bool: ...

    @abstractmethod
    def _compress(self, x: np.ndarray, y: np.ndarray) -> Compressed: ...

    @abstractmethod
    def _reconstruct(self, x: np.ndarray, y: np.ndarray, side: int) -> Hypothesis: ...


class ThresholdScheme(CompressionScheme):
    r"""Thresholds :math:`h_t(x) = 1[x \ge t]` on the line; keep the smallest positive (k = 1).

    Every negative lies below :math:`t \le` the smallest positive :math:`p`, so
    :math:`1[x \ge p]` is consistent; with no positive, keep nothing and predict 0.
    """

    size = 1
    name = "thresholds"

    def _realizable(self, x, y):
        pos, neg = x[y == 1], x[y == 0]
        return pos.size == 0 or neg.size == 0 or neg.max() < pos.min()

    def _compress(self, x, y):
        pos = np.flatnonzero(y == 1)
        if pos.size == 0:
            return Compressed(())
        return Compressed((int(pos[np.argmin(x[pos])]),))

    def _reconstruct(self, x, y, side):
        if not y.any():
            return _const(0)
        t = float(x[y == 1].min())
        return lambda z: (np.asarray(z, dtype=np.float64) >= t).astype(np.int64)


class IntervalScheme(CompressionScheme):
    r"""Intervals :math:`1[a \le x \le b]`; keep the smallest and largest positives (k = 2).

    The hull :math:`[p_{\min}, p_{\max}]` of the positives lies inside :math:`[a, b]`, so it
    holds no negative.
    """

    size = 2
    name = "intervals"

    def _realizable(self, x, y):
        pos, neg = x[y == 1], x[y == 0]
        if pos.size == 0:
            return True
        return not ((neg >= pos.min()) & (neg <= pos.max())).any()

    def _compress(self, x, y):
        pos = np.flatnonzero(y == 1)
        if pos.size == 0:
            return Compressed(())
        lo, hi = int(pos[np.argmin(x[pos])]), int(pos[np.argmax(x[pos])])
        return Compressed(tuple(sorted({lo, hi})))

    def _reconstruct(self, x, y, side):
        if not y.any():
            return _const(0)
        a, b = float(x[y == 1].min()), float(x[y == 1].max())
        return lambda z: ((np.asarray(z) >= a) & (np.asarray(z) <= b)).astype(np.int64)


class BoxScheme(CompressionScheme):
    r"""Axis-aligned boxes :math:`\prod_j [a_j, b_j] \subset \mathbb R^d` (k = 2d).

    Keep, for each axis, the positives with the smallest and largest coordinate; their bounding
    box equals the bounding box of all positives, which sits inside the target box.
    """

    name = "boxes"

    def __init__(self, dim: int):
        if int(dim) < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self.dim = int(dim)
        self.size = 2 * self.dim

    def _realizable(self, x, y):
        pos, neg = x[y == 1], x[y == 0]
        if pos.size == 0:
            return True
        inside = ((neg >= pos.min(0)) & (neg <= pos.max(0))).all(axis=1)
        return not inside.any()

    def _compress(self, x, y):
        pos = np.flatnonzero(y == 1)
        if pos.size == 0:
            return Compressed(())
        keep = {int(pos[np.argmin(x[pos, j])]) for j in range(self.dim)}
        keep |= {int(pos[np.argmax(x[pos, j])]) for j in range(self.dim)}
        return Compressed(tuple(sorted(keep)))

    def _reconstruct(self, x, y, side):
        if not y.any():
            return _const(0)
        lo, hi = x[y == 1].min(0), x[y == 1].max(0)

        def h(z):
            z = np.asarray(z, dtype=np.float64).reshape(-1, self.dim)
            return ((z >= lo) & (z <= hi)).all(axis=1).astype(np.int64)

        return h


def _runs(x: np.ndarray, y: np.ndarray) -> list[tuple[int, int]] | None:
    """Maximal runs of positives in sorted order, as (first, last) sample indices.

    Returns ``None`` when equal points carry different labels (no function labels them).
    """
    order = np.lexsort((y, x))
    xs, ys = x[order], y[order]
    same = np.flatnonzero(xs[1:] == xs[:-1])
    if (ys[same] != ys[same + 1]).any():
        return None
    runs: list[tuple[int, int]] = []
    start = None
    for j in range(len(xs)):
        if ys[j] == 1 and start is None:
            start = j
        if ys[j] == 1 and (j == len(xs) - 1 or ys[j + 1] == 0):
            runs.append((int(order[start]), int(order[j])))
            start = None
    return runs


class UnionOfIntervalsScheme(CompressionScheme):
    r"""Unions of at most :math:`s` closed intervals; keep run endpoints (k = 2s, |B| = 2^{2s}).

    In sorted order the positives form at most :math:`s` maximal runs (each target interval
    covers whole runs, and a negative separates consecutive runs). Keep both endpoints of every
    run; a one-point run is kept once, so the reconstruction cannot pair the kept points by
    position alone. The side information is the bit mask, over the kept points in sorted order,
    of the one-point runs; the other kept points pair up consecutively.
    """

    name = "unions of intervals"

    def __init__(self, s: int):
        if int(s) < 1:
            raise ValueError(f"number of intervals s must be >= 1, got {s}")
        self.s = int(s)
        self.size = 2 * self.s
        self.n_side = 2 ** (2 * self.s)

    def _realizable(self, x, y):
        runs = _runs(x, y)
        return runs is not None and len(runs) <= self.s

    def _compress(self, x, y):
        runs = _runs(x, y)
        keep = sorted({i for r in runs for i in r})
        # side bit j (over kept points sorted by value) marks a one-point run
        singles = {a for a, b in runs if a == b}
        by_value = sorted(keep, key=lambda i: x[i])
        side = sum(1 << j for j, i in enumerate(by_value) if i in singles)
        return Compressed(tuple(keep), side)

    def _reconstruct(self, x, y, side):
        xs = np.sort(x)
        intervals, j = [], 0
        while j < len(xs):
            if side >> j & 1:
                intervals.append((xs[j], xs[j]))
                j += 1
            else:
                if j + 1 >= len(xs):
                    raise ValueError("side information does not pair the kept points")
                intervals.append((xs[j], xs[j + 1]))
                j += 2
        lo = np.array([a for a, _ in intervals])
        hi = np.array([b for _, b in intervals])

        def h(z):
            z = np.asarray(z, dtype=np.float64)[:, None]
            return ((z >= lo) & (z <= hi)).any(axis=1).astype(np.int64)

        return h


def _hull(points: np.ndarray) -> list[int]:
    """Indices of the convex hull's vertices (Andrew's monotone chain; collinear points dropped)."""
    n = len(points)
    order = sorted(range(n), key=lambda i: (points[i, 0], points[i, 1]))
    uniq = []
    for i in order:  # drop duplicated points
        if not uniq or not np.array_equal(points[uniq[-1]], points[i]):
            uniq.append(i)
    if len(uniq) <= 2:
        return uniq

    def cross(o, a, b):
        pa, pb = points[a] - points[o], points[b] - points[o]
        return pa[0] * pb[1] - pa[1] * pb[0]

    lower, upper = [], []
    for i in uniq:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], i) <= 0:
            lower.pop()
        lower.append(i)
    for i in reversed(uniq):
        while len(upper) >= 2 and cross(upper[-2], upper[-1], i) <= 0:
            upper.pop()
        upper.append(i)
    return lower[:-1] + upper[:-1]


def _closest_on_segment(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float]:
    ab = b - a
    den = float(ab @ ab)
    t = 0.0 if den == 0.0 else min(1.0, max(0.0, float((p - a) @ ab) / den))
    return a + t * ab, t


def max_margin_halfplane(
    x: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, float, tuple[int, ...]] | None:
    r"""The hard-margin separator of a 2-D sample and a support set of at most 3 points.

    The max-margin line is the perpendicular bisector of the closest pair
    :math:`(p^\star, n^\star)` between the convex hulls of the two classes; for disjoint convex
    polygons one of the two closest points is a vertex, so scanning vertex-edge pairs finds it.
    :math:`w = p^\star - n^\star`, :math:`c = w\cdot(p^\star + n^\star)/2`, and the prediction is
    :math:`1[w \cdot x > c]`. The support set is the vertex and the edge's endpoints that carry
    weight (2 or 3 points): its own max-margin line is the same one.

    Returns:
        ``(w, c, support)`` or ``None`` if the classes cannot be strictly separated (or one
        class is empty).
    """
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    if pos.size == 0 or neg.size == 0:
        return None
    hp = [int(pos[i]) for i in _hull(x[pos])]
    hn = [int(neg[i]) for i in _hull(x[neg])]
    best = (np.inf, None)

    def edges(h):
        if len(h) == 1:
            return [(h[0], h[0])]
        return [(h[i], h[(i + 1) % len(h)]) for i in range(len(h))]

    for verts, other, vert_pos in ((hp, hn, True), (hn, hp, False)):
        for v in verts:
            for a, b in edges(other):
                q, t = _closest_on_segment(x[v], x[a], x[b])
                d = float(np.sum((x[v] - q) ** 2))
                if d < best[0]:
                    supp = {v} | ({a} if t < 1.0 else set()) | ({b} if t > 0.0 else set())
                    pair = (x[v], q) if vert_pos else (q, x[v])
                    best = (d, (pair, tuple(sorted(supp))))
    if best[1] is None or best[0] == 0.0:
        return None
    (p_star, n_star), support = best[1]
    w = p_star - n_star
    c = float(w @ (p_star + n_star)) / 2.0
    score = x @ w - c
    if not ((score[pos] > 0).all() and (score[neg] < 0).all()):
        return None  # the hulls intersect: no separating line
    return w, c, support


class HalfplaneScheme(CompressionScheme):
    r"""Halfplanes :math:`1[w \cdot x > c]` in :math:`\mathbb R^2` via max-margin support sets.

    Compression keeps the support set (<= 3 points, Carathéodory in dimension 2 + 1) of the
    hard-margin SVM; reconstruction solves the hard-margin SVM of the kept points, which is the
    same line: the margin of a subset is at least that of the whole sample, the support set's
    line separates the whole sample with its own margin, and the max-margin line is unique.
    One-class samples keep one point of that class (or nothing for all-negative) and
    reconstruct a constant.
    """

    size = 3
    dim = 2
    name = "halfplanes"

    def _realizable(self, x, y):
        if (y == 1).all() or (y == 0).all():
            return True
        return max_margin_halfplane(x, y) is not None

    def _compress(self, x, y):
        if (y == 0).all():
            return Compressed(())
        if (y == 1).all():
            return Compressed((0,))
        _, _, support = max_margin_halfplane(x, y)
        return Compressed(support)

    def _reconstruct(self, x, y, side):
        if x.shape[0] == 0 or (y == 0).all():
            return _const(0)
        if (y == 1).all():
            return _const(1)
        sol = max_margin_halfplane(x, y)
        if sol is None:
            raise ValueError("halfplanes: kept points are not separable")
        w, c, _ = sol

        def h(z):
            z = np.asarray(z, dtype=np.float64).reshape(-1, 2)
            return (z @ w - c > 0).astype(np.int64)

        return h


@dataclass
class CheckReport:
    """What :func:`check_scheme` found: counts and the first few counterexamples."""

    n_samples: int = 0
    max_kept: int = 0
    failures: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def check_scheme(
    scheme: CompressionScheme,
    sampler: Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]],
    n_samples: int,
    seed: int = 0,
    max_failures: int = 5,
) -> CheckReport:
    r"""Verify a scheme on ``n_samples`` random realizable samples.

    For each sample :math:`S` from ``sampler(rng)`` it checks that the kept index set is a
    set of at most ``scheme.size`` valid indices, the side information lies in
    ``range(scheme.n_side)``, and the reconstruction :math:`\rho(S_I, b)` labels **all** of
    :math:`S` correctly. The reconstruction is called with the kept points only.

    Returns:
        A :class:`CheckReport`; ``report.ok`` is False if any sample failed.
    """
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    rng = np.random.default_rng(seed)
    rep = CheckReport()
    for _ in range(n_samples):
        x, y = sampler(rng)
        rep.n_samples += 1
        reason = None
        try:
            c = scheme.compress(x, y)
            idx = list(c.indices)
            rep.max_kept = max(rep.max_kept, len(idx))
            if len(idx) > scheme.size:
                reason = f"kept {len(idx)} points > size {scheme.size}"
            elif len(set(idx)) != len(idx) or any(not 0 <= i < len(y) for i in idx):
                reason = f"invalid indices {idx}"
            elif not 0 <= c.side < scheme.n_side:
                reason = f"side information {c.side} outside range({scheme.n_side})"
            else:
                h = scheme.reconstruct(np.asarray(x)[idx], np.asarray(y)[idx], c.side)
                wrong = np.flatnonzero(h(np.asarray(x)) != np.asarray(y))
                if wrong.size:
                    reason = f"reconstruction mislabels {wrong.size} points, e.g. index {wrong[0]}"
        except ValueError as err:
            reason = f"ValueError: {err}"
        if reason is not None and len(rep.failures) < max_failures:
            rep.failures.append({"x": np.asarray(x), "y": np.asarray(y), "reason": reason})
        elif reason is not None:
            rep.failures.append({"reason": reason})
    return rep


class CompressionLearner:
    r"""The Littlestone–Warmuth learner: :math:`A(S) = \rho(\kappa(S))`, with its PAC bound.

    Example:
        >>> import numpy as np
        >>> learner = CompressionLearner(ThresholdScheme())
        >>> x = np.linspace(0, 1, 11); h = learner.fit(x, (x >= 0.45).astype(int))
        >>> round(learner.bound(m=11, delta=0.1), 4)
        0.4787
    """

    def __init__(self, scheme: CompressionScheme):
        self.scheme = scheme

    def fit(self, x, y) -> Hypothesis:
        return self.scheme.learn(x, y)

    def bound(self, m: int, delta: float, exact: bool = False) -> float:
        """The error bound holding with probability >= 1 - delta over m i.i.d. examples."""
        from .bounds import compression_bound, compression_bound_exact

        f = compression_bound_exact if exact else compression_bound
        return f(m, self.scheme.size, delta, n_side=self.scheme.n_side)
