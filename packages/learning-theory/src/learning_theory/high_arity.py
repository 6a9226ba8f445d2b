r"""High-arity learning: product spaces, the grid sampling model, and high-arity compression.

**Setting** (after Coregliano–Malliaris' high-arity PAC learning). The domain is a product
:math:`X_1 \times \dots \times X_k`, a concept is :math:`F: X_1 \times \dots \times X_k \to
\{0, 1\}` (a :math:`k`-partite hypergraph on the factors), and each factor carries a distribution
:math:`\mu_i`. A sample is :math:`m` i.i.d. points :math:`x_i^{(1)}, \dots, x_i^{(m)} \sim \mu_i`
per factor together with the labels :math:`F(x_1^{(j_1)}, \dots, x_k^{(j_k)})` of **all**
:math:`m^k` tuples they form (a :class:`GridSample`). The error of :math:`h` is
:math:`\Pr_{x \sim \mu_1 \otimes \dots \otimes \mu_k}[h(x) \ne F(x)]`.

**High-arity compression.** A scheme keeps index sets :math:`I_i \subseteq [m]`,
:math:`|I_i| \le s`, plus side information :math:`b \in B`, and reconstructs :math:`h` from the
labelled sub-grid on :math:`I_1 \times \dots \times I_k` and :math:`b` alone; on realizable grids
:math:`h` must label all :math:`m^k` tuples correctly. The learner ``compress -> reconstruct``
has error at most :func:`learning_theory.bounds.high_arity_bound` with probability
:math:`1-\delta` (derivation there: only :math:`m - s` independent diagonal tuples are used).

Schemes:

- :class:`ProductScheme`: :math:`F(x) = \prod_i f_i(x_i)` with each :math:`f_i` in a classical
  class (thresholds, intervals, boxes, ...): its positives form a product set
  :math:`P_1 \times \dots \times P_k`; compress each factor's projected labelling with the
  classical scheme (plus one positive witness per factor so that the sub-grid reveals which kept
  points lie in :math:`P_i`). Products of intervals are the "rectangle" relations.
- :class:`SumThresholdScheme`: :math:`F(x) = 1[\sum_i x_i \ge \theta]` (a non-product
  :math:`k`-partite threshold hypergraph); keep the positive tuple of least sum (s = 1).
- :class:`BipartiteHalfplaneScheme`: :math:`F(x, y) = 1[w_1 x + w_2 y > c]` on
  :math:`\mathbb R \times \mathbb R` (half-graphs and their tilts); keep the hard-margin support
  tuples (<= 3, so s = 3); the sub-grid has the same max-margin line.

Example:
    >>> import numpy as np
    >>> from learning_theory.compression import ThresholdScheme
    >>> rng = np.random.default_rng(0)
    >>> F = ProductConcept([lambda x: x >= 0.3, lambda x: x >= 0.5])
    >>> S = draw_grid(F, [rng.uniform(size=20), rng.uniform(size=20)])
    >>> scheme = ProductScheme([ThresholdScheme(), ThresholdScheme()])
    >>> c = scheme.compress(S); [len(i) for i in c.indices]
    [1, 1]
    >>> h = scheme.reconstruct(S.subgrid(c.indices), c.side)
    >>> bool((grid_labels(h, S.points) == S.labels).all())
    True
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .bounds import high_arity_bound
from .compression import CompressionScheme, max_margin_halfplane

__all__ = [
    "BipartiteHalfplane",
    "BipartiteHalfplaneScheme",
    "GridSample",
    "HighArityCompressed",
    "HighArityLearner",
    "HighArityScheme",
    "ProductConcept",
    "ProductScheme",
    "SumThreshold",
    "SumThresholdScheme",
    "check_high_arity_scheme",
    "draw_grid",
    "grid_labels",
    "product_error",
]

TupleFn = Callable[[Sequence[np.ndarray]], np.ndarray]


@dataclass
class GridSample:
    """Factor samples and the labels of every tuple: ``labels[j_1, ..., j_k]``."""

    points: list[np.ndarray]
    labels: np.ndarray

    def __post_init__(self):
        self.points = [np.asarray(p, dtype=np.float64) for p in self.points]
        self.labels = np.asarray(self.labels)
        shape = tuple(len(p) for p in self.points)
        if not self.points:
            raise ValueError("a grid sample needs at least one factor")
        if self.labels.shape != shape:
            raise ValueError(
                f"labels must have shape {shape} (one per tuple), got {self.labels.shape}"
            )
        if self.labels.size and not np.isin(self.labels, (0, 1)).all():
            raise ValueError("labels must be 0 or 1")
        if any(not np.isfinite(p).all() for p in self.points):
            raise ValueError("points must be finite (found NaN or inf)")
        self.labels = self.labels.astype(np.int64)

    @property
    def arity(self) -> int:
        return len(self.points)

    def subgrid(self, indices: Sequence[Sequence[int]]) -> GridSample:
        """The sample restricted to :math:`I_1 \\times \\dots \\times I_k`."""
        if len(indices) != self.arity:
            raise ValueError(f"need {self.arity} index sets, got {len(indices)}")
        idx = [np.asarray(list(i), dtype=np.int64) for i in indices]
        return GridSample(
            [p[i] for p, i in zip(self.points, idx, strict=True)], self.labels[np.ix_(*idx)]
        )


def grid_labels(f: TupleFn, points: Sequence[np.ndarray]) -> np.ndarray:
    """:math:`f` on every tuple of the grid, shape ``(m_1, ..., m_k)``."""
    points = [np.asarray(p, dtype=np.float64) for p in points]
    shape = tuple(len(p) for p in points)
    if 0 in shape:
        return np.zeros(shape, dtype=np.int64)
    idx = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    coords = [p[i.ravel()] for p, i in zip(points, idx, strict=True)]
    return np.asarray(f(coords)).astype(np.int64).reshape(shape)


def draw_grid(f: TupleFn, points: Sequence[np.ndarray]) -> GridSample:
    """The labelled grid sample of concept ``f`` on the given factor samples."""
    return GridSample(list(points), grid_labels(f, points))


def product_error(
    h: TupleFn,
    f: TupleFn,
    samplers: Sequence[Callable[[np.random.Generator, int], np.ndarray]],
    rng: np.random.Generator,
    n: int = 20000,
) -> float:
    """Monte-Carlo error under the product measure: ``n`` i.i.d. tuples."""
    coords = [s(rng, n) for s in samplers]
    return float(np.mean(np.asarray(h(coords)) != np.asarray(f(coords))))


class ProductConcept:
    r""":math:`F(x_1, \dots, x_k) = \prod_i f_i(x_i)`."""

    def __init__(self, factors: Sequence[Callable[[np.ndarray], np.ndarray]]):
        self.factors = list(factors)

    def __call__(self, coords):
        out = np.ones(len(coords[0]), dtype=bool)
        for f, c in zip(self.factors, coords, strict=True):
            out &= np.asarray(f(c)).astype(bool)
        return out.astype(np.int64)


class SumThreshold:
    r""":math:`F(x) = 1[\sum_i x_i \ge \theta]`."""

    def __init__(self, theta: float):
        self.theta = float(theta)

    def __call__(self, coords):
        return (np.sum(np.stack(coords), axis=0) >= self.theta).astype(np.int64)


class BipartiteHalfplane:
    r""":math:`F(x, y) = 1[w_1 x + w_2 y > c]`."""

    def __init__(self, w1: float, w2: float, c: float):
        self.w, self.c = np.array([w1, w2], dtype=np.float64), float(c)

    def __call__(self, coords):
        x, y = coords
        return (self.w[0] * np.asarray(x) + self.w[1] * np.asarray(y) > self.c).astype(np.int64)


@dataclass(frozen=True)
class HighArityCompressed:
    """Kept index sets (one increasing tuple per factor) and side information."""

    indices: tuple[tuple[int, ...], ...]
    side: int = 0


def _const(value: int) -> TupleFn:
    return lambda coords: np.full(len(coords[0]), value, dtype=np.int64)


class HighArityScheme(ABC):
    """A high-arity compression scheme: at most ``size`` points per factor, ``n_side`` values."""

    arity: int
    size: int
    n_side: int = 1
    name: str = "high-arity scheme"

    def _validate(self, sample: GridSample) -> None:
        if not isinstance(sample, GridSample):
            raise ValueError(f"expected a GridSample, got {type(sample).__name__}")
        if sample.arity != self.arity:
            raise ValueError(f"{self.name}: arity {self.arity}, sample has {sample.arity} factors")

    def realizable(self, sample: GridSample) -> bool:
        self._validate(sample)
        return self._realizable(sample)

    def compress(self, sample: GridSample) -> HighArityCompressed:
        """Compress a realizable grid; ``ValueError`` if it is not realizable."""
        self._validate(sample)
        if not self._realizable(sample):
            raise ValueError(f"{self.name}: the grid sample is not realizable by the class")
        return self._compress(sample)

    def reconstruct(self, sub: GridSample, side: int = 0) -> TupleFn:
        """The hypothesis rebuilt from the labelled kept sub-grid and the side information."""
        self._validate(sub)
        if not 0 <= int(side) < self.n_side:
            raise ValueError(f"{self.name}: side information {side} not in range({self.n_side})")
        return self._reconstruct(sub, int(side))

    def learn(self, sample: GridSample) -> TupleFn:
        c = self.compress(sample)
        return self.reconstruct(sample.subgrid(c.indices), c.side)

    @abstractmethod
    def _realizable(self, sample: GridSample) -> bool: ...

    @abstractmethod
    def _compress(self, sample: GridSample) -> HighArityCompressed: ...

    @abstractmethod
    def _reconstruct(self, sub: GridSample, side: int) -> TupleFn: ...


def _factor_labels(labels: np.ndarray, axis: int) -> np.ndarray:
    """:math:`\\ell_i(j) = 1` iff some positive tuple has coordinate :math:`j` on axis :math:`i`."""
    other = tuple(a for a in range(labels.ndim) if a != axis)
    return labels.any(axis=other).astype(np.int64) if other else labels.astype(np.int64)


class ProductScheme(HighArityScheme):
    r"""Products :math:`\prod_i f_i(x_i)` of classical classes, one classical scheme per factor.

    Size per factor :math:`s = \max_i (s_i + [\text{scheme } i \text{ may keep no positive}])`,
    side information :math:`|B| = \prod_i |B_i|` (mixed radix).
    """

    def __init__(self, factor_schemes: Sequence[CompressionScheme]):
        self.schemes = list(factor_schemes)
        if not self.schemes:
            raise ValueError("need at least one factor scheme")
        self.arity = len(self.schemes)
        self.size = max(s.size + (0 if s.positive_witness else 1) for s in self.schemes)
        self.n_side = math.prod(s.n_side for s in self.schemes)
        self.name = "product of " + " x ".join(s.name for s in self.schemes)

    def _realizable(self, sample):
        y = sample.labels
        if not y.any():
            return True
        ells = [_factor_labels(y, i) for i in range(self.arity)]
        outer = ells[0]
        for e in ells[1:]:
            outer = np.multiply.outer(outer, e)
        if not np.array_equal(outer, y):
            return False
        return all(
            s.realizable(p, e) for s, p, e in zip(self.schemes, sample.points, ells, strict=True)
        )

    def _compress(self, sample):
        y = sample.labels
        if not y.any():
            return HighArityCompressed(tuple(() for _ in range(self.arity)))
        kept, side, radix = [], 0, 1
        for i, (s, p) in enumerate(zip(self.schemes, sample.points, strict=True)):
            e = _factor_labels(y, i)
            c = s.compress(p, e)
            idx = set(c.indices)
            if not any(e[j] for j in idx):
                idx.add(int(np.argmax(e)))  # a positive witness
            kept.append(tuple(sorted(idx)))
            side += c.side * radix
            radix *= s.n_side
        return HighArityCompressed(tuple(kept), side)

    def _reconstruct(self, sub, side):
        y = sub.labels
        if not y.any():
            return _const(0)
        hs = []
        for i, (s, p) in enumerate(zip(self.schemes, sub.points, strict=True)):
            e = _factor_labels(y, i)
            b = side % s.n_side
            side //= s.n_side
            hs.append(s.reconstruct(p, e, b))

        return ProductConcept(hs)


class SumThresholdScheme(HighArityScheme):
    r""":math:`1[\sum_i x_i \ge \theta]` on :math:`\mathbb R^k`: keep the least-sum positive tuple.

    Every positive tuple has sum at least that tuple's sum :math:`\hat\theta \ge \theta`, every
    negative sum is below :math:`\theta`, so :math:`1[\sum x_i \ge \hat\theta]` is consistent.
    """

    size = 1

    def __init__(self, arity: int):
        if int(arity) < 1:
            raise ValueError(f"arity must be >= 1, got {arity}")
        self.arity = int(arity)
        self.name = f"sum-threshold (k={self.arity})"

    def _sums(self, sample):
        return sum(
            np.asarray(p).reshape((1,) * i + (-1,) + (1,) * (self.arity - i - 1))
            for i, p in enumerate(sample.points)
        )

    def _realizable(self, sample):
        if sample.labels.size == 0:
            return True
        sums = np.broadcast_to(self._sums(sample), sample.labels.shape)
        pos, neg = sums[sample.labels == 1], sums[sample.labels == 0]
        return pos.size == 0 or neg.size == 0 or neg.max() < pos.min()

    def _compress(self, sample):
        y = sample.labels
        if not y.any():
            return HighArityCompressed(tuple(() for _ in range(self.arity)))
        sums = np.where(y == 1, np.broadcast_to(self._sums(sample), y.shape), np.inf)
        j = np.unravel_index(int(np.argmin(sums)), y.shape)
        return HighArityCompressed(tuple((int(a),) for a in j))

    def _reconstruct(self, sub, side):
        if sub.labels.size == 0 or not sub.labels.any():
            return _const(0)
        sums = np.where(sub.labels == 1, np.broadcast_to(self._sums(sub), sub.labels.shape), np.inf)
        return SumThreshold(float(sums.min()))


class BipartiteHalfplaneScheme(HighArityScheme):
    r"""Bipartite halfplane graphs :math:`1[w_1 x + w_2 y > c]`: keep the support tuples.

    The tuples :math:`(x^{(i)}, y^{(j)})` are points of :math:`\mathbb R^2`; the hard-margin
    support set has at most 3 tuples, hence at most 3 points per factor. The kept sub-grid
    contains the support tuples and lies inside the full grid, so its margin is squeezed between
    the two equal margins and, by uniqueness, its max-margin line is the full grid's.
    """

    arity = 2
    size = 3
    name = "bipartite halfplanes"

    @staticmethod
    def _tuples(sample):
        xs, ys = sample.points
        X, Y = np.meshgrid(xs, ys, indexing="ij")
        return np.stack([X.ravel(), Y.ravel()], axis=1), sample.labels.ravel()

    def _realizable(self, sample):
        pts, y = self._tuples(sample)
        if y.size == 0 or y.all() or not y.any():
            return True
        return max_margin_halfplane(pts, y) is not None

    def _compress(self, sample):
        pts, y = self._tuples(sample)
        if not y.any():
            return HighArityCompressed(((), ()))
        if y.all():
            return HighArityCompressed(((0,), (0,)))
        _, _, support = max_margin_halfplane(pts, y)
        n2 = len(sample.points[1])
        rows = sorted({s // n2 for s in support})
        cols = sorted({s % n2 for s in support})
        return HighArityCompressed((tuple(rows), tuple(cols)))

    def _reconstruct(self, sub, side):
        pts, y = self._tuples(sub)
        if y.size == 0 or not y.any():
            return _const(0)
        if y.all():
            return _const(1)
        sol = max_margin_halfplane(pts, y)
        if sol is None:
            raise ValueError("bipartite halfplanes: the kept sub-grid is not separable")
        w, c, _ = sol
        return lambda coords: (w[0] * coords[0] + w[1] * coords[1] - c > 0).astype(np.int64)


@dataclass
class HighArityCheckReport:
    n_samples: int = 0
    max_kept: int = 0
    failures: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def check_high_arity_scheme(
    scheme: HighArityScheme,
    sampler: Callable[[np.random.Generator], GridSample],
    n_samples: int,
    seed: int = 0,
) -> HighArityCheckReport:
    """Verify a high-arity scheme on random realizable grids (as :func:`check_scheme`)."""
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    rng = np.random.default_rng(seed)
    rep = HighArityCheckReport()
    for _ in range(n_samples):
        S = sampler(rng)
        rep.n_samples += 1
        reason = None
        try:
            c = scheme.compress(S)
            sizes = [len(i) for i in c.indices]
            rep.max_kept = max([rep.max_kept, *sizes])
            if len(c.indices) != S.arity:
                reason = f"{len(c.indices)} index sets for arity {S.arity}"
            elif max(sizes, default=0) > scheme.size:
                reason = f"kept {sizes} points > size {scheme.size} per factor"
            elif any(
                len(set(i)) != len(i) or any(not 0 <= j < len(p) for j in i)
                for i, p in zip(c.indices, S.points, strict=True)
            ):
                reason = f"invalid indices {c.indices}"
            elif not 0 <= c.side < scheme.n_side:
                reason = f"side information {c.side} outside range({scheme.n_side})"
            else:
                h = scheme.reconstruct(S.subgrid(c.indices), c.side)
                wrong = int((grid_labels(h, S.points) != S.labels).sum())
                if wrong:
                    reason = f"reconstruction mislabels {wrong} tuples"
        except ValueError as err:
            reason = f"ValueError: {err}"
        if reason is not None:
            rep.failures.append({"sample": S if len(rep.failures) < 5 else None, "reason": reason})
    return rep


class HighArityLearner:
    r"""The learner ``compress -> reconstruct`` with its bound in the factor sample size :math:`m`.

    Example:
        >>> learner = HighArityLearner(SumThresholdScheme(2))
        >>> round(learner.bound(m=11, delta=0.1), 5)  # (2 ln 12 + ln 10) / 10
        0.72724
    """

    def __init__(self, scheme: HighArityScheme):
        self.scheme = scheme

    def fit(self, sample: GridSample) -> TupleFn:
        return self.scheme.learn(sample)

    def bound(self, m: int, delta: float) -> float:
        return high_arity_bound(m, self.scheme.size, self.scheme.arity, delta, self.scheme.n_side)
