"""Compression schemes pass their checker; the checker catches broken schemes; bad input."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learning_theory.compression import (
    BoxScheme,
    Compressed,
    CompressionLearner,
    HalfplaneScheme,
    IntervalScheme,
    ThresholdScheme,
    UnionOfIntervalsScheme,
    check_scheme,
    max_margin_halfplane,
)
from learning_theory.samplers import realizable_sampler

SCHEMES = {
    "thresholds": ThresholdScheme(),
    "intervals": IntervalScheme(),
    "boxes": BoxScheme(2),
    "unions": UnionOfIntervalsScheme(3),
    "halfplanes": HalfplaneScheme(),
}


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_scheme_passes_checker_on_random_realizable_samples(name):
    n, m_max = (1000, 20) if name == "halfplanes" else (2000, 30)  # hulls are pure Python
    rep = check_scheme(SCHEMES[name], realizable_sampler(name, m_max), n, seed=1)
    assert rep.ok, rep.failures[:2]
    assert rep.n_samples == n
    assert rep.max_kept == SCHEMES[name].size  # the size bound is attained, not slack


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(-20, 20), min_size=0, max_size=25),
    st.lists(st.tuples(st.integers(-20, 20), st.integers(-20, 20)), min_size=0, max_size=3),
)
def test_union_scheme_on_integer_grids_with_duplicates(xs, ivs):
    # integer points make ties and duplicates common; the target is a union of <= 3 intervals
    x = np.array(xs, dtype=float)
    y = np.zeros(len(xs), dtype=int)
    for a, b in ivs:
        y |= ((x >= min(a, b)) & (x <= max(a, b))).astype(int)
    s = UnionOfIntervalsScheme(3)
    h = s.learn(x, y)
    assert (h(x) == y).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=20))
def test_halfplane_support_set_gives_the_same_line_as_the_whole_sample(pts):
    x = np.array(pts, dtype=float)
    y = (x[:, 0] + 2 * x[:, 1] > 12.5).astype(int)  # integer points: margin >= 0.5/sqrt(5)
    sol = max_margin_halfplane(x, y)
    if y.all() or not y.any():
        assert sol is None
        return
    w, c, supp = sol
    w2, c2, _ = max_margin_halfplane(x[list(supp)], y[list(supp)])
    scale = np.linalg.norm(w)
    assert np.allclose(w / scale, w2 / np.linalg.norm(w2)) and np.isclose(
        c / scale, c2 / np.linalg.norm(w2)
    )
    margin = np.abs(x @ w - c) / scale
    assert margin.min() == pytest.approx(scale / 2)  # half the hull distance
    assert len(supp) <= 3


def test_halfplane_margin_matches_brute_force_over_directions():
    # the hard-margin line maximises min_i y_i (w.x_i - c)/|w|: compare against a fine grid of
    # directions, each with its best offset (a 1-D problem solved exactly)
    rng = np.random.default_rng(3)
    for _ in range(20):
        x = rng.uniform(0, 1, (15, 2))
        y = (x @ np.array([1.0, -0.7]) > 0.1).astype(int)
        if y.all() or not y.any():
            continue
        w, c, _ = max_margin_halfplane(x, y)
        ours = np.min(np.where(y == 1, 1, -1) * (x @ w - c)) / np.linalg.norm(w)

        def margins(angles, x=x, y=y):
            u = np.stack([np.cos(angles), np.sin(angles)])
            proj = x @ u
            return (proj[y == 1].min(0) - proj[y == 0].max(0)) / 2

        a = np.linspace(0, 2 * np.pi, 4001)
        for width in (2 * np.pi / 4000, 1e-5):  # coarse grid, then a zoom around its best
            a0 = a[np.argmax(margins(a))]
            a = np.linspace(a0 - width, a0 + width, 4001)
        best = margins(a).max()
        assert ours == pytest.approx(best, rel=1e-7) and ours >= best - 1e-12


class _BrokenInterval(IntervalScheme):
    """Keeps only the leftmost positive: the rebuilt interval is a point."""

    def _compress(self, x, y):
        c = super()._compress(x, y)
        return Compressed(c.indices[:1])


class _Oversize(ThresholdScheme):
    def _compress(self, x, y):
        return Compressed(tuple(range(min(2, len(y)))))


def test_checker_fails_broken_schemes():
    rep = check_scheme(_BrokenInterval(), realizable_sampler("intervals", 30), 200, seed=0)
    assert not rep.ok and "mislabels" in rep.failures[0]["reason"]
    rep = check_scheme(_Oversize(), realizable_sampler("thresholds", 30), 50, seed=0)
    assert not rep.ok and "size" in rep.failures[0]["reason"]


def test_reconstruction_sees_only_kept_points():
    # the union scheme's side bits are needed: without them two different unions are confused
    s = UnionOfIntervalsScheme(2)
    x = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    for y in ([1, 0, 1, 1, 0], [1, 1, 0, 1, 0]):
        y = np.array(y)
        c = s.compress(x, y)
        assert len(c.indices) == 3
        h = s.reconstruct(x[list(c.indices)], y[list(c.indices)], c.side)
        assert (h(x) == y).all()


@pytest.mark.parametrize(
    ("scheme", "x", "y"),
    [
        (ThresholdScheme(), [0.5, 0.2], [0, 1]),
        (IntervalScheme(), [0.1, 0.5, 0.9], [1, 0, 1]),
        (BoxScheme(2), [[0, 0], [1, 1], [0.5, 0.5]], [1, 1, 0]),
        (UnionOfIntervalsScheme(1), [0.1, 0.5, 0.9], [1, 0, 1]),
        (UnionOfIntervalsScheme(2), [0.3, 0.3], [1, 0]),
        (HalfplaneScheme(), [[0, 0], [1, 1], [1, 0], [0, 1]], [1, 1, 0, 0]),  # XOR
    ],
)
def test_unrealizable_samples_raise(scheme, x, y):
    with pytest.raises(ValueError, match="not realizable"):
        scheme.compress(np.array(x, dtype=float), np.array(y))


def test_bad_shapes_and_labels_raise():
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        ThresholdScheme().compress(np.array([0.1]), np.array([2]))
    with pytest.raises(ValueError, match="shape"):
        BoxScheme(3).compress(np.zeros((4, 2)), np.zeros(4, dtype=int))
    with pytest.raises(ValueError, match="finite"):
        IntervalScheme().compress(np.array([np.nan]), np.array([1]))
    with pytest.raises(ValueError, match="side information"):
        ThresholdScheme().reconstruct(np.array([0.1]), np.array([1]), side=1)
    with pytest.raises(ValueError, match="s must be"):
        UnionOfIntervalsScheme(0)


def test_learner_error_rate_is_within_the_bound_in_a_monte_carlo():
    # thresholds under U[0,1] with target t: the learner's error is p_min - t (exact)
    rng = np.random.default_rng(0)
    learner = CompressionLearner(ThresholdScheme())
    m, delta = 40, 0.05
    errs = []
    for _ in range(2000):
        t = rng.uniform(0.2, 0.8)
        x = rng.uniform(0, 1, m)
        h = learner.fit(x, (x >= t).astype(int))
        grid = np.linspace(0, 1, 4001)
        errs.append(np.mean(h(grid) != (grid >= t)))
    # exact: P[err > e] = (1-e)^m when no positive/negative mass issue; bound at confidence delta
    assert np.mean(np.array(errs) > learner.bound(m, delta)) <= delta
    assert np.mean(np.array(errs) > learner.bound(m, delta, exact=True)) <= delta
    # and the bound is not vacuous: the (1 - delta) error quantile is within a factor 3 of it
    assert np.quantile(errs, 1 - delta) > learner.bound(m, delta) / 3


def test_every_kept_subset_is_needed_for_intervals():
    # brute force over all samples of 4 grid points: the scheme is consistent on each labelling
    x = np.array([0.1, 0.4, 0.6, 0.9])
    for y in itertools.product((0, 1), repeat=4):
        y = np.array(y)
        s = IntervalScheme()
        if not s.realizable(x, y):
            continue
        assert (s.learn(x, y)(x) == y).all()
