"""Locally refined hierarchical-grid gradients vs prolongation, dense norms and global levels."""

import itertools
import math

import numpy as np
import pytest
import torch

from adaptive_fgd.functional import pl_rate
from adaptive_fgd.pde import PoissonHierarchy
from adaptive_fgd.pde_local import HierarchicalGrid, local_pde_fgd, refine_local, truncate


def _bump(x, y, lib):
    # a sharp feature in one corner of the domain: what local refinement is for
    return 16 * x * (1 - x) * y * (1 - y) * lib.exp(-((x - 0.3) ** 2 + (y - 0.6) ** 2) / 0.0072)


def _bump_source(p):
    pt = torch.tensor(p, dtype=torch.float64, requires_grad=True)
    u = _bump(pt[:, 0], pt[:, 1], torch)
    (g,) = torch.autograd.grad(u.sum(), pt, create_graph=True)
    lap = sum(torch.autograd.grad(g[:, i].sum(), pt, retain_graph=True)[0][:, i] for i in range(2))
    return (-lap).detach().numpy()


@pytest.mark.parametrize("top", [2, 3, 5])
def test_surplus_truncation_to_levels_is_the_coarse_interpolant(top):
    # route 1: keep the surpluses of levels <= l; route 2: sample v at the level-l nodes and
    # prolongate with the (separately tested) interpolation matrices.
    hier = PoissonHierarchy(top, lambda p: np.ones(len(p)))
    grid = HierarchicalGrid(hier)
    v = np.random.default_rng(top).standard_normal(grid.size)
    w = grid.surplus(v)
    np.testing.assert_allclose(grid.synthesis(w), v, rtol=0, atol=1e-13 * top)
    for lev in range(1, top + 1):
        at_level = grid.level <= lev
        sample = np.zeros((2**lev - 1) ** 2)
        s = 2 ** (top - lev)  # the level-lev grid index of a top node (i, j) is (i/s, j/s)
        idx = (grid.i[at_level] // s - 1) * (2**lev - 1) + (grid.j[at_level] // s - 1)
        sample[idx] = v[at_level]
        np.testing.assert_allclose(
            truncate(grid, w, at_level), hier.to_top(lev) @ sample, rtol=0, atol=1e-13 * top
        )
    assert np.bincount(grid.level)[1:].tolist() == [
        (2**lev - 1) ** 2 - (2 ** (lev - 1) - 1) ** 2 for lev in range(1, top + 1)
    ]


def test_parents_are_edge_ends_of_the_coarser_mesh_and_closure_is_closed():
    hier = PoissonHierarchy(5, lambda p: np.ones(len(p)))
    grid = HierarchicalGrid(hier)
    pts = hier.points
    for q in np.random.default_rng(0).choice(grid.size, 50, replace=False):
        for p in grid.parents[q]:
            if p >= 0:  # a parent is one level coarser and sits at half the node's spacing
                assert grid.level[p] < grid.level[q]
                step = np.abs(pts[p] - pts[q]) * 2 ** grid.level[q]
                assert set(np.round(step, 12)) <= {0.0, 1.0}
    mask = np.zeros(grid.size, dtype=bool)
    mask[np.random.default_rng(1).choice(grid.size, 20, replace=False)] = True
    closed = grid.close(mask)
    assert closed[mask].all()
    par = grid.parents[closed].ravel()
    assert closed[par[par >= 0]].all()


@pytest.mark.parametrize("mode", ["local", "global"])
def test_refine_local_error_is_the_exact_energy_ratio_and_meets_delta(mode):
    hier = PoissonHierarchy(5, lambda p: np.ones(len(p)))
    grid = HierarchicalGrid(hier)
    rng = np.random.default_rng(7)
    a = hier.A.toarray()
    floor = grid.initial(1)
    for delta in (0.1, 0.3, 0.7):
        g = np.linalg.solve(a, rng.standard_normal(grid.size))  # a rough representer
        mask, ghat, err, _, tries = refine_local(grid, g, delta, 1, floor, mode=mode)
        d = g - ghat
        assert math.isclose(err, math.sqrt(d @ a @ d / (g @ a @ g)), rel_tol=1e-10)
        assert err <= delta and tries >= 1
        par = grid.parents[mask].ravel()
        assert mask[par[par >= 0]].all()
        if mode == "global":  # whole levels only
            assert np.array_equal(mask, grid.level <= grid.level[mask].max())


def test_local_fgd_reaches_the_manufactured_floor_with_fewer_nodes_than_global_levels():
    # Same representation, same exact check, same step: only the selection differs. Both must
    # converge to the discrete minimiser (whose error to the analytic solution is the direct
    # solver's), each step must contract the energy gap by the PL bound (the condition holds
    # exactly here), and the local grid must get there with fewer nodes in total.
    hier = PoissonHierarchy(6, _bump_source)
    exact = _bump(hier.points[:, 0], hier.points[:, 1], np)
    floor = np.sqrt(np.mean((hier.reference() - exact) ** 2))
    e_ref = hier.energy(hier.reference())
    delta, bound = 0.3, pl_rate(1.0, 1.0, 0.3)
    used = {}
    for mode in ("local", "global"):
        _, recs = local_pde_fgd(hier, 25, delta=delta, mode=mode, exact=exact)
        assert recs[-1].l2_error <= 1.05 * floor
        assert all(r.rel_error <= delta for r in recs)
        gaps = [-e_ref] + [r.energy - e_ref for r in recs]  # E(0) = 0
        for a, b in itertools.pairwise(gaps):
            if a > 1e-12:
                assert b <= bound * a * (1 + 1e-9) + 1e-14
        hit = next(i for i, r in enumerate(recs) if r.l2_error <= 1.1 * floor)
        used[mode] = sum(r.size for r in recs[: hit + 1])
    assert used["local"] < 0.5 * used["global"], used


def test_local_fgd_bad_input():
    hier = PoissonHierarchy(3, lambda p: np.ones(len(p)))
    grid = HierarchicalGrid(hier)
    with pytest.raises(ValueError, match="delta"):
        local_pde_fgd(hier, 2, delta=1.0)
    with pytest.raises(ValueError, match="mode"):
        refine_local(grid, np.ones(grid.size), 0.3, 1, grid.initial(1), mode="uniform")
    with pytest.raises(ValueError, match="vanishes"):
        refine_local(grid, np.zeros(grid.size), 0.3, 1, grid.initial(1))
    with pytest.raises(ValueError, match="growth"):
        refine_local(grid, np.ones(grid.size), 0.3, 1, grid.initial(1), growth=1.0)
    with pytest.raises(ValueError, match="start_level"):
        local_pde_fgd(hier, 2, start_level=4)
