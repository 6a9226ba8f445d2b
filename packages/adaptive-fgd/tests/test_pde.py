"""H^1_0 FGD for elliptic PDEs vs exact nesting, direct solves and a manufactured solution."""

import itertools
import math

import numpy as np
import pytest
import scipy.sparse.linalg as spla

from adaptive_fgd.functional import pl_rate, step_size
from adaptive_fgd.pde import (
    PoissonHierarchy,
    grid_points,
    hierarchical_error,
    pde_fgd,
    projected_gradient,
    prolongation,
    stiffness,
)


def _u(p):
    x, y = p[:, 0], p[:, 1]
    return np.sin(np.pi * x) * np.sin(2 * np.pi * y)


def _s(p):  # -Laplacian of _u, by hand
    return 5 * np.pi**2 * _u(p)


@pytest.mark.parametrize("level", [1, 2, 3, 5])
def test_prolongation_is_exact_nesting(level):
    # Galerkin coarse operator of the fine stiffness = the coarse stiffness, exactly (integers
    # and halves: no rounding); and P reproduces every linear function at the interior nodes.
    p = prolongation(level)
    galerkin = (p.T @ stiffness(level + 1) @ p - stiffness(level)).toarray()
    assert np.abs(galerkin).max() == 0.0
    lin = lambda q: 0.3 * q[:, 0] - 1.7 * q[:, 1] + 0.2  # noqa: E731
    fine, coarse = grid_points(level + 1), grid_points(level)
    inner = (fine > 1.5 / 2 ** (level + 1)).all(1) & (fine < 1 - 1.5 / 2 ** (level + 1)).all(1)
    np.testing.assert_allclose((p @ lin(coarse))[inner], lin(fine)[inner], rtol=0, atol=1e-13)


def test_direct_solver_converges_at_second_order_to_the_analytic_solution():
    errs = []
    for top in (3, 4, 5, 6):
        h = PoissonHierarchy(top, _s)
        errs.append(np.abs(h.reference() - _u(h.points)).max())
    orders = [math.log2(a / b) for a, b in itertools.pairwise(errs)]
    assert all(1.9 <= o <= 2.1 for o in orders), orders


def test_projected_gradient_is_the_energy_orthogonal_projection():
    # route 1: P A_l^{-1} P^T r; route 2: the A-orthogonal projection of g = A^{-1} r onto
    # range(P), by a dense least-squares problem in the A-inner product.
    h = PoissonHierarchy(4, _s)
    rng = np.random.default_rng(0)
    u = rng.standard_normal(h.A.shape[0])
    r = h.residual(u)
    g = spla.spsolve(h.A.tocsc(), r)
    for level in (2, 3):
        ghat, nrm2 = projected_gradient(h, level, r)
        p = h.to_top(level).toarray()
        a = h.A.toarray()
        c = np.linalg.solve(p.T @ a @ p, p.T @ a @ g)
        np.testing.assert_allclose(ghat, p @ c, rtol=1e-10, atol=1e-12 * np.abs(g).max())
        assert math.isclose(nrm2, float(ghat @ a @ ghat), rel_tol=1e-10)
        # the hierarchical estimate equals the error relative to the level + 1 representer
        # (hence a lower bound of the error relative to g)
        g1, _ = projected_gradient(h, level + 1, r)
        true = math.sqrt((g1 - ghat) @ a @ (g1 - ghat) / (g1 @ a @ g1))
        assert math.isclose(hierarchical_error(h, level, r), true, rel_tol=1e-8)


def test_exact_gradient_fgd_is_the_closed_form_iteration():
    # top-level FGD on the Poisson energy: u_t - u* = (1 - eta)^t (u_0 - u*) exactly.
    h = PoissonHierarchy(4, _s)
    ref = h.reference()
    eta = step_size(1.0, 0.3)
    u, recs = pde_fgd(h, 12, start_level=4, adaptive=False, delta=0.3)
    np.testing.assert_allclose(u - ref, (1 - eta) ** 12 * (0 - ref), rtol=0, atol=1e-12)
    assert all(r.true_error < 1e-12 for r in recs)


@pytest.mark.parametrize("reaction", ["none", "cubic"])
def test_adaptive_levels_converge_linearly_within_the_pl_bound(reaction):
    source = (lambda p: _s(p) + _u(p) ** 3) if reaction == "cubic" else _s
    h = PoissonHierarchy(6, source, reaction=reaction)
    ref = h.reference()
    e_ref = h.energy(ref)
    u, recs = pde_fgd(h, 25, delta=0.3, start_level=2, u_bound=1.0, exact=_u(h.points))
    gaps = [h.energy(np.zeros_like(ref)) - e_ref] + [r.energy - e_ref for r in recs]
    bound = pl_rate(h.smoothness(1.0), 1.0, 0.3)
    assert all(b <= a for a, b in itertools.pairwise(gaps))
    used = [(a, b) for a, b in itertools.pairwise(gaps) if b > 1e-10 * abs(e_ref)]
    assert used and all(b / a <= bound * (1 + 1e-9) for a, b in used)  # per-step contraction
    assert len({r.level for r in recs}) > 1 and max(r.level for r in recs) == 6  # it refined
    assert all(r.est_error <= 0.3 for r in recs)
    # gap_25 <= bound^25 gap_0 ~ 3e-3 gap_0 (Poisson: ||u - u*||_A^2 = 2 gap): a few 1e-5 away
    np.testing.assert_allclose(u, ref, atol=1e-4 * np.abs(ref).max())


def test_pde_bad_inputs():
    with pytest.raises(ValueError, match="level"):
        PoissonHierarchy(1, _s)
    with pytest.raises(ValueError, match="reaction"):
        PoissonHierarchy(3, _s, reaction="quadratic")
    with pytest.raises(ValueError, match="finite"):
        PoissonHierarchy(3, lambda p: np.full(p.shape[0], np.nan))
    h = PoissonHierarchy(3, _s)
    with pytest.raises(ValueError, match="delta"):
        pde_fgd(h, 3, delta=1.0)
    with pytest.raises(ValueError, match="start_level"):
        pde_fgd(h, 3, start_level=4)
    with pytest.raises(ValueError, match="non-finite"):
        h.residual(np.full(h.A.shape[0], np.inf))
    with pytest.raises(ValueError, match="non-finite energy"):
        pde_fgd(h, 3, start_level=3, adaptive=False, lr=1e308)
