"""Halfspaces in R^d: the support-set scheme against independent references."""

import itertools

import numpy as np
import pytest

from learning_theory.compression import Compressed, check_scheme, max_margin_halfplane
from learning_theory.halfspaces import HalfspaceScheme, max_margin_halfspace, min_norm_point
from learning_theory.samplers import realizable_sampler

# tolerances here follow an error model; `nox -s numerics` reruns them on every BLAS path
pytestmark = pytest.mark.numerics


@pytest.mark.parametrize(("name", "d"), [("halfspaces3", 3), ("halfspaces5", 5)])
def test_scheme_passes_checker_and_attains_d_plus_one(name, d):
    rep = check_scheme(HalfspaceScheme(d), realizable_sampler(name, 30), 1000, seed=2)
    assert rep.ok, rep.failures[:2]
    assert rep.max_kept == d + 1  # the size bound is attained, not slack


def test_agrees_with_the_exact_planar_hull_construction():
    # In R^2 the package has an independent exact construction (convex hulls): same line.
    rng = np.random.default_rng(4)
    sampler = realizable_sampler("halfplanes", 35)
    compared = 0
    while compared < 200:
        x, y = sampler(rng)
        if y.size == 0 or y.min() == y.max():
            continue
        w, b, support = max_margin_halfspace(x, y)
        w2, c2, _ = max_margin_halfplane(x, y)
        r1 = np.append(w, b) / np.linalg.norm(w)
        r2 = np.append(w2, -c2) / np.linalg.norm(w2)
        np.testing.assert_allclose(r1, r2, atol=1e-8)
        assert len(support) <= 3
        compared += 1


def test_margin_is_the_largest_over_many_directions():
    # Brute force: no direction separates the sample with a wider slab than the SVM's 2/|w|.
    rng = np.random.default_rng(5)
    x = rng.normal(size=(41, 3))
    y = (x @ np.array([1.0, -0.5, 2.0]) > 0.2).astype(int)
    w, b, _ = max_margin_halfspace(x, y)
    s = 2 * y - 1
    assert (s * (x @ w + b)).min() == pytest.approx(1.0, abs=1e-9)
    # Uniform directions, and directions close to the optimum, where a wrong answer would show.
    scales = np.repeat([0.02, 0.002], 10000)[:, None]
    near = w / np.linalg.norm(w) + scales * rng.normal(size=(20000, 3))
    dirs = np.vstack([rng.normal(size=(20000, 3)), near])
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    proj = x @ dirs.T
    widths = proj[y == 1].min(0) - proj[y == 0].max(0)
    assert widths.max() <= 2 / np.linalg.norm(w) + 1e-12
    assert widths.max() >= 0.999 * 2 / np.linalg.norm(w)  # the perturbed directions come close


def test_min_norm_point_against_brute_force_in_the_plane():
    # The nearest point of a planar polygon to the origin (kept outside it) is a vertex or lies
    # on an edge between two points: enumerate them all.
    rng = np.random.default_rng(6)
    for _ in range(200):
        away = rng.normal(size=2)
        pts = rng.normal(size=(int(rng.integers(1, 9)), 2)) + 8 * away / np.linalg.norm(away)
        x, weights = min_norm_point(pts)
        best = min(np.linalg.norm(p) for p in pts)
        for a, c in itertools.combinations(pts, 2):
            t = np.clip(-(a @ (c - a)) / max((c - a) @ (c - a), 1e-300), 0, 1)
            best = min(best, np.linalg.norm(a + t * (c - a)))
        assert np.linalg.norm(x) == pytest.approx(best, rel=1e-9)
        assert all(v > 0 for v in weights.values()) and sum(weights.values()) == pytest.approx(1)
        np.testing.assert_allclose(sum(v * pts[k] for k, v in weights.items()), x, atol=1e-12)


def _min_norm_brute_force(pts):
    """Nearest point of conv(pts) to the origin by enumerating every face of <= 3 points: the
    affine minimiser of each subset, kept when its weights are non-negative."""
    best = np.inf
    for k in (1, 2, 3):
        for idx in itertools.combinations(range(len(pts)), k):
            q = pts[list(idx)]
            kkt = np.zeros((k + 1, k + 1))
            kkt[:k, :k], kkt[:k, k], kkt[k, :k] = q @ q.T, 1.0, 1.0
            lam = np.linalg.lstsq(kkt, np.r_[np.zeros(k), 1.0], rcond=None)[0][:k]
            if (lam >= -1e-12).all():
                best = min(best, float(np.linalg.norm(lam @ q)))
    return best


def test_min_norm_point_on_parallelogram_difference_sets():
    # A 2 x 2 sample gives the difference set {p_a - q_a, p_a - q_b, p_b - q_a, p_b - q_b}: four
    # affinely dependent points (a parallelogram). Wolfe's corral then re-adds and drops the same
    # point with no progress; this cycled for 10,000 iterations and raised in the main job
    # (learning-theory.compression-bounds --quick). The first case is that input.
    failing = np.array(
        [
            [0.8107447224200904, -0.20798719987925868, -0.8798917725848528],
            [-0.2999314088717885, 0.16443195858930212, 0.35989874772650665],
            [0.7067333240836986, -0.45571184698930256, -0.7121483309766493],
            [-0.4039428072081803, -0.08329268852074172, 0.5276421893347102],
        ]
    )
    rng = np.random.default_rng(7)
    cases = [failing]
    for _ in range(300):
        pa, pb, qa, qb = rng.normal(size=(4, 3))
        cases.append(np.array([pa - qa, pa - qb, pb - qa, pb - qb]))
    for pts in cases:
        x, weights = min_norm_point(pts)
        want = _min_norm_brute_force(pts)
        scale = np.sqrt((pts**2).sum(1).max())
        # rounding of the KKT solves: a few eps of the points' scale on |x|
        assert np.linalg.norm(x) == pytest.approx(want, abs=1e-12 * scale)
        assert all(v > 0 for v in weights.values()) and sum(weights.values()) == pytest.approx(1)


def test_degenerate_lattice_keeps_at_most_d_plus_one_points():
    # Many points tight at once (a lattice): Carathéodory elimination still keeps <= d + 1.
    grid = np.array(list(itertools.product(range(4), repeat=3)), dtype=float)
    y = (grid[:, 2] >= 2).astype(int)  # margin planes z = 1 and z = 2 hold 16 points each
    scheme = HalfspaceScheme(3)
    c = scheme.compress(grid, y)
    assert 2 <= len(c.indices) <= 4
    h = scheme.reconstruct(grid[list(c.indices)], y[list(c.indices)])
    assert (h(grid) == y).all()


def test_not_separable_is_refused_and_a_broken_scheme_fails_the_checker():
    cube = np.array(list(itertools.product((0.0, 1.0), repeat=3)))
    parity = (cube.sum(1) % 2).astype(int)  # no halfspace labels the cube's vertices by parity
    scheme = HalfspaceScheme(3)
    assert not scheme.realizable(cube, parity)
    with pytest.raises(ValueError, match="not realizable"):
        scheme.compress(cube, parity)

    class DropOne(HalfspaceScheme):
        def _compress(self, x, y):
            c = super()._compress(x, y)
            return Compressed(c.indices[:-1]) if len(c.indices) > 2 else c

    rep = check_scheme(DropOne(3), realizable_sampler("halfspaces3", 30), 300, seed=3)
    assert not rep.ok


def test_bad_dimension():
    for d in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="dim"):
            HalfspaceScheme(d)


@pytest.mark.parametrize("log_scale", range(-8, 9, 2))
def test_scheme_is_invariant_to_the_units_of_the_data(log_scale):
    # The max-margin hyperplane is equivariant under x -> c x + t, so the support set and the
    # labelling must not change with the units (absolute tolerances made 1e4 raise and 1e-6
    # report "not realizable"). Reference: the same sample at unit scale.
    rng = np.random.default_rng(17)
    scheme = HalfspaceScheme(4)
    w = rng.normal(size=4)
    x = rng.normal(size=(37, 4))
    y = (x @ w > 0.2).astype(int)
    ref = scheme.compress(x, y).indices
    c = 10.0**log_scale
    t = rng.normal(size=4) * c * 3.0
    xs = c * x + t
    kept = scheme.compress(xs, y).indices
    assert kept == ref
    h = scheme.reconstruct(xs[list(kept)], y[list(kept)])
    assert (h(xs) == y).all()


def test_a_small_margin_sample_that_compresses_also_reconstructs():
    # margin 2e-5 at unit scale: accepted samples must reconstruct (the kept points' hulls
    # are at least as far apart as the sample's), at any scale
    rng = np.random.default_rng(5)
    w = np.array([1.0, -1.0, 0.5])
    w /= np.linalg.norm(w)
    x = rng.normal(size=(60, 3))
    side = np.where(np.arange(60) % 2 == 0, 1.0, -1.0)
    # distance to the plane w.x = 0: exactly 2e-5 for the first four points, more for the rest
    dist = np.where(np.arange(60) < 4, 2e-5, 2e-5 + np.abs(rng.normal(size=60)))
    x += np.outer(side * dist - x @ w, w)
    y = (side > 0).astype(int)
    scheme = HalfspaceScheme(3)
    for c in (1e-6, 1.0, 1e4):
        xs = c * x
        comp = scheme.compress(xs, y)
        h = scheme.reconstruct(xs[list(comp.indices)], y[list(comp.indices)])
        assert (h(xs) == y).all()
