"""The fused NumPy/SciPy loops against the reference torch routes and dense float64 algebra.

Tolerances follow the error model of a sum of |Ω| (or m n) products of O(1) numbers:
relative error ≲ (m n) · eps64 on each reduction, taken as TOL = 1e3 · m n · eps64 of the
scale of the terms summed (not of their possibly cancelling total).
"""

import numpy as np
import pytest
import torch

from eps_completion import bm_gd, low_rank_matrix, observe, random_mask, rgd
from eps_completion.fused_bm import _Dense, _Sparse, fused_bm_gd, use_dense
from eps_completion.fused_rgd import RgdProducts
from eps_completion.linesearch import quartic_argmin
from eps_completion.objective import line_quartic, quadratic_form, value_and_grad
from eps_completion.omega import OmegaOps
from eps_completion.sensing import EpsSensing
from eps_completion.solvers import _egrad_products, spectral_init

EPS64 = float(torch.finfo(torch.float64).eps)

SHAPES = [(9, 7, 2), (5, 13, 4), (17, 6, 1), (23, 19, 3)]


def _random(m, n, k, p, seed, weights="uniform", eps=0.3):
    g = torch.Generator().manual_seed(seed)
    mat = torch.randn(m, n, generator=g, dtype=torch.float64)
    obs = observe(mat, torch.rand(m, n, generator=g) < p, allow_empty_lines=True)
    op = EpsSensing(obs, eps, weights=weights, generator=g)
    L = torch.randn(m, k, generator=g, dtype=torch.float64)
    R = torch.randn(n, k, generator=g, dtype=torch.float64)
    return op, L, R


def _tol(m, n):
    return 1e3 * m * n * EPS64


def _states(op, L, R):
    """Both routes (the sparse one only for uniform weights) at the point (L, R)."""
    xi = None if op.xi is None else op.xi.numpy()
    out = [_Dense(op.obs, op.eps, xi, L.numpy().copy(), R.numpy().copy())]
    if op.xi is None:
        out.append(_Sparse(op.obs, op.eps, L.numpy().copy(), R.numpy().copy()))
    return out


@pytest.mark.parametrize("weights", ["uniform", "random"])
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_fused_value_gradient_and_quartic_match_the_reference(weights, m, n, k):
    op, L, R = _random(m, n, k, 0.45, m + 3 * n + k, weights)
    f, d_l, d_r = value_and_grad(L, R, op.obs, op.eps, op.xi)
    ref_c = line_quartic(L, R, -d_l, -d_r, op.obs, op.eps, op.xi)
    g2 = float(d_l.pow(2).sum() + d_r.pow(2).sum())
    # the scale of the terms each quantity sums (weights <= 1): |X|^2 + |b|^2 for f; for
    # c_i, the Frobenius bounds of its inner products with X1 = dL R^T + L dR^T,
    # X2 = dL dR^T and the gradient-in-X G (|G| <= |X| + |b|)
    scale_f = float((L @ R.T).pow(2).sum() + op.obs.values.pow(2).sum())
    nx1 = float((d_l @ R.T + L @ d_r.T).norm())
    nx2 = float((d_l @ d_r.T).norm())
    ng = float((L @ R.T).norm() + op.obs.values.norm())
    scales = [g2 + ng * nx1, nx1**2 + ng * nx2, nx1 * nx2, nx2**2]
    for st in _states(op, L, R):
        f2, gl, gr = st.value_grad()
        assert abs(f2 - float(f)) <= _tol(m, n) * scale_f
        ref_g = max(float(d_l.norm()), float(d_r.norm()))
        assert np.abs(gl - d_l.numpy()).max() <= _tol(m, n) * ref_g
        assert np.abs(gr - d_r.numpy()).max() <= _tol(m, n) * ref_g
        c = st.quartic(gl, gr, float(np.sum(gl * gl) + np.sum(gr * gr)))
        # c1 is the directional derivative -||grad||^2 exactly (the reference forms it as a
        # difference of two large numbers)
        assert abs(c[0] + g2) <= _tol(m, n) * scales[0]
        for a, b, sc in zip(c, ref_c, scales, strict=True):
            assert abs(a - b) <= _tol(m, n) * sc


@pytest.mark.parametrize("eps", [None, 0.1])
@pytest.mark.parametrize(("m", "n", "k"), [(31, 26, 3), (12, 40, 2)])
def test_fused_loop_takes_the_reference_steps(eps, m, n, k):
    """Ten iterations from one start: every route's iterates agree with the torch loop's to
    rounding (the iteration is a smooth map far from a stall, so errors grow mildly)."""
    g = torch.Generator().manual_seed(m * n + k)
    mat = low_rank_matrix(m, n, k, g)
    obs = observe(mat, random_mask((m, n), 0.35, g))
    L0 = torch.randn(m, k, generator=g, dtype=torch.float64)
    R0 = torch.randn(n, k, generator=g, dtype=torch.float64)
    ref = bm_gd(obs, k, eps, init=(L0, R0), max_iter=10, gtol=0.0, backend="torch")
    e = 0.0 if eps is None else eps
    x_ref = ref.matrix().numpy()
    for route in ("dense", "sparse"):
        lf, rf, n_it, _conv, hist = fused_bm_gd(
            obs, e, None, L0.numpy(), R0.numpy(), 10, 0.0, route=route
        )
        assert n_it == ref.n_iter == 10
        assert np.abs(lf @ rf.T - x_ref).max() <= 1e3 * _tol(m, n) * np.abs(x_ref).max()
        np.testing.assert_allclose(hist, ref.history, rtol=1e3 * _tol(m, n))


def test_fused_and_reference_bm_reach_the_same_minimiser_with_dense_weights():
    g = torch.Generator().manual_seed(5)
    mat = low_rank_matrix(21, 17, 2, g)
    mask = random_mask((21, 17), 0.45, g)
    op = EpsSensing(observe(mat, mask), 0.1, weights="random", generator=g)
    a = bm_gd(op.obs, 2, 0.1, xi=op.xi, generator=torch.Generator().manual_seed(1))
    b = bm_gd(op.obs, 2, 0.1, xi=op.xi, generator=torch.Generator().manual_seed(1), backend="torch")
    assert a.converged and b.converged
    # both stop at ||grad|| <= 1e-10 s^1.5 of a strongly convex basin: ~1e-10 apart
    assert float((a.matrix() - b.matrix()).norm() / b.matrix().norm()) < 1e-8


@pytest.mark.parametrize(("m", "n", "k", "eps"), [(37, 29, 3, 0.2), (50, 45, 2, None)])
def test_fused_rgd_products_and_iterates_match_the_reference(m, n, k, eps):
    g = torch.Generator().manual_seed(m + n)
    mat = low_rank_matrix(m, n, k, g)
    obs = observe(mat, random_mask((m, n), 0.4, g))
    e = 0.0 if eps is None else eps
    x = spectral_init(obs, k)
    prods = RgdProducts(obs, e)
    f, gv, gtu = prods.egrad(x)
    f_ref, gv_ref, gtu_ref = _egrad_products(x, obs, e, None)
    scale = float(obs.values.pow(2).sum() + x.S.pow(2).sum())
    assert abs(f - float(f_ref)) <= _tol(m, n) * scale
    assert float((gv - gv_ref).abs().max()) <= _tol(m, n) * float(gv_ref.abs().max())
    assert float((gtu - gtu_ref).abs().max()) <= _tol(m, n) * float(gtu_ref.abs().max())
    lf = torch.randn(m, 2 * k, generator=g, dtype=torch.float64)
    rf = torch.randn(n, 2 * k, generator=g, dtype=torch.float64)
    q_ref = float(quadratic_form(lf, rf, obs, e))
    assert abs(prods.curvature(lf, rf) - q_ref) <= _tol(m, n) * abs(q_ref)
    a = rgd(obs, k, eps, backend="fused")
    b = rgd(obs, k, eps, backend="torch")
    assert a.converged and b.converged and a.n_iter == b.n_iter
    assert float((a.matrix() - b.matrix()).norm() / b.matrix().norm()) < 1e-9


@pytest.mark.parametrize(("m", "n", "k"), [(13, 8, 2), (6, 21, 5)])
def test_omega_ops_against_dense_products(m, n, k):
    op, L, R = _random(m, n, k, 0.5, 7 * m + n)
    om = OmegaOps(op.obs)
    x_dense = (L @ R.T).numpy()
    mask = op.obs.dense_mask().numpy()
    np.testing.assert_allclose(om.entries(L.numpy(), R.numpy(), "x"), x_dense[mask], rtol=1e-13)
    vals = np.random.default_rng(0).standard_normal(op.obs.n_observed)
    om.set_values(vals)
    s_dense = np.zeros((m, n))
    s_dense[mask] = vals  # row-major order, as observe() sorts Omega
    tol = _tol(m, n) * float(np.abs(vals).max()) * k
    assert np.abs(om.times(R.numpy()) - s_dense @ R.numpy()).max() <= tol
    assert np.abs(om.times_t(L.numpy()) - s_dense.T @ L.numpy()).max() <= tol


def test_quartic_argmin_is_the_lowest_positive_stationary_point():
    rng = np.random.default_rng(3)
    for _ in range(200):
        c = rng.standard_normal(4)
        c[0] = -abs(c[0])
        c[3] = abs(c[3]) * 10 ** rng.uniform(-6, 0)
        t = quartic_argmin(list(c))
        assert t > 0
        q = np.polynomial.Polynomial([0.0, *c])
        # brute force: a fine grid past every stationary point (|t| <= 1 + max|c_i/c_4|)
        grid = np.linspace(0, 1 + np.abs(c[:3] / c[3]).max(), 200_001)
        assert q(t) <= q(grid).min() + 1e-9 * (1 + abs(q(grid).min()))
        assert abs(q.deriv()(t)) <= 1e-7 * (1 + np.abs(c).sum() * (1 + t) ** 3)
    assert quartic_argmin([1.0, 1.0, 0.0, 1.0]) == 0.0  # ascent direction: no step
    assert quartic_argmin([-1.0, 1.0, 0.0, 0.0]) == pytest.approx(0.5)  # quadratic


def test_route_rule_and_bad_backend_arguments():
    assert use_dense(30, 30, 2, 150)  # tiny: call overhead bound, dense
    assert not use_dense(2000, 2000, 5, 400_000)  # large and sparse
    assert not use_dense(512, 512, 4, 26_000)  # m n k above the single-thread BLAS range
    assert use_dense(400, 64, 4, 12_800)  # half observed
    g = torch.Generator().manual_seed(0)
    obs = observe(low_rank_matrix(8, 7, 2, g), random_mask((8, 7), 0.6, g))
    with pytest.raises(ValueError, match="backend"):
        bm_gd(obs, 2, 0.1, backend="numba")
    with pytest.raises(ValueError, match="backend"):
        rgd(obs, 2, 0.1, backend="")
    with pytest.raises(ValueError, match="route"):
        fused_bm_gd(obs, 0.1, None, np.ones((8, 2)), np.ones((7, 2)), 3, 0.0, route="csr")
    with pytest.raises(ValueError, match="uniform"):
        fused_bm_gd(obs, 0.1, np.ones((8, 7)), np.ones((8, 2)), np.ones((7, 2)), 3, 0.0, "sparse")
    with pytest.raises(ValueError, match="uniform"):
        rgd(obs, 2, 0.1, xi=torch.ones(8, 7, dtype=torch.float64), backend="fused")
