"""Random realizable targets and samples (for checkers, tests and experiments).

Classical: :func:`random_target` draws a concept of a named class, :func:`draw` draws uniform
points of its domain ([0, 1] or [0, 1]^2), :func:`realizable_sampler` combines both.
High-arity: :func:`high_arity_target` returns ``(concept, scheme, factor samplers)``,
:func:`high_arity_sampler` draws labelled grids. Factors are uniform on [0, 1].
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = [
    "CLASSES",
    "HIGH_ARITY",
    "draw",
    "high_arity_sampler",
    "high_arity_target",
    "random_target",
    "realizable_sampler",
]

Target = Callable[[np.ndarray], np.ndarray]


def _threshold(rng):
    t = rng.uniform(0, 1)
    return lambda x: (x >= t).astype(np.int64)


def _interval(rng):
    a, b = np.sort(rng.uniform(0, 1, 2))
    return lambda x: ((x >= a) & (x <= b)).astype(np.int64)


def _box(rng, d=2):
    lo = rng.uniform(0, 0.6, d)
    hi = lo + rng.uniform(0.1, 0.4, d)
    return lambda x: ((x >= lo) & (x <= hi)).all(axis=1).astype(np.int64)


def _union(rng, s=3):
    ends = np.sort(rng.uniform(0, 1, 2 * s)).reshape(s, 2)

    def f(x):
        z = x[:, None]
        return ((z >= ends[:, 0]) & (z <= ends[:, 1])).any(axis=1).astype(np.int64)

    return f


def _halfplane(rng, margin=1e-3):
    ang = rng.uniform(0, 2 * np.pi)
    w = np.array([np.cos(ang), np.sin(ang)])
    c = float(w @ rng.uniform(0.2, 0.8, 2))
    f = lambda x: (x @ w - c > 0).astype(np.int64)  # noqa: E731
    f.keep = lambda x: np.abs(x @ w - c) > margin  # drop points on the boundary's rounding band
    return f


def _halfspace(d: int):
    def make(rng, margin=1e-3):
        w = rng.normal(size=d)
        w /= np.linalg.norm(w)
        c = float(w @ rng.uniform(0.2, 0.8, d))
        f = lambda x: (x @ w - c > 0).astype(np.int64)  # noqa: E731
        f.keep = lambda x: np.abs(x @ w - c) > margin
        return f

    return make


CLASSES = {
    "thresholds": (_threshold, None),
    "intervals": (_interval, None),
    "boxes": (_box, 2),
    "unions": (_union, None),
    "halfplanes": (_halfplane, 2),
    "halfspaces3": (_halfspace(3), 3),
    "halfspaces5": (_halfspace(5), 5),
}


def random_target(name: str, rng: np.random.Generator) -> Target:
    """A random concept of the named class (see ``CLASSES``)."""
    if name not in CLASSES:
        raise ValueError(f"unknown class {name!r}; choose from {sorted(CLASSES)}")
    return CLASSES[name][0](rng)


def draw(name: str, target: Target, m: int, rng: np.random.Generator) -> np.ndarray:
    """``m`` uniform points of the class's domain (boundary band removed for halfplanes)."""
    d = CLASSES[name][1]
    if d is None:
        return rng.uniform(0, 1, m)
    x = rng.uniform(0, 1, (m, d))
    keep = getattr(target, "keep", None)
    while keep is not None and not keep(x).all():
        bad = ~keep(x)
        x[bad] = rng.uniform(0, 1, (int(bad.sum()), d))
    return x


def realizable_sampler(name: str, m_max: int = 30):
    """A sampler ``rng -> (x, y)``: random target, random size in [0, m_max], labelled sample."""

    def sampler(rng):
        f = random_target(name, rng)
        m = int(rng.integers(0, m_max + 1))
        x = draw(name, f, m, rng)
        return x, f(x)

    return sampler


# ---------------------------------------------------------------- high-arity targets


def _uniform(rng, n):
    return rng.uniform(0, 1, n)


def high_arity_target(name: str, rng: np.random.Generator):
    """``(concept, scheme, factor samplers)`` for a random concept of a named high-arity class.

    Classes: ``thresholds^k`` (k = 2, 3), ``rectangles`` (products of two intervals),
    ``sum-threshold3`` and ``bipartite-halfplanes``; factors uniform on [0, 1].
    """
    from .compression import IntervalScheme, ThresholdScheme
    from .high_arity import (
        BipartiteHalfplane,
        BipartiteHalfplaneScheme,
        ProductConcept,
        ProductScheme,
        SumThreshold,
        SumThresholdScheme,
    )

    if name in ("thresholds^2", "thresholds^3"):
        k = int(name[-1])
        ts = rng.uniform(0, 0.7, k)
        f = ProductConcept([lambda x, t=t: x >= t for t in ts])
        return f, ProductScheme([ThresholdScheme() for _ in range(k)]), [_uniform] * k
    if name == "rectangles":
        ivs = [np.sort(rng.uniform(0, 1, 2)) for _ in range(2)]
        f = ProductConcept([lambda x, a=a, b=b: (x >= a) & (x <= b) for a, b in ivs])
        return f, ProductScheme([IntervalScheme(), IntervalScheme()]), [_uniform] * 2
    if name == "sum-threshold3":
        return SumThreshold(rng.uniform(0.5, 2.5)), SumThresholdScheme(3), [_uniform] * 3
    if name == "bipartite-halfplanes":
        ang = rng.uniform(0, 2 * np.pi)
        w = np.array([np.cos(ang), np.sin(ang)])
        c = float(w @ rng.uniform(0.2, 0.8, 2))
        return BipartiteHalfplane(w[0], w[1], c), BipartiteHalfplaneScheme(), [_uniform] * 2
    raise ValueError(f"unknown high-arity class {name!r}; choose from {HIGH_ARITY}")


HIGH_ARITY = [
    "thresholds^2",
    "thresholds^3",
    "rectangles",
    "sum-threshold3",
    "bipartite-halfplanes",
]


def high_arity_sampler(name: str, m_max: int = 8):
    """A sampler ``rng -> GridSample`` of a random concept of the class, m ~ U{0..m_max}."""
    from .high_arity import draw_grid

    def sampler(rng):
        f, _, samplers = high_arity_target(name, rng)
        m = [int(rng.integers(0, m_max + 1)) for _ in samplers]
        return draw_grid(f, [s(rng, n) for s, n in zip(samplers, m, strict=True)])

    return sampler
