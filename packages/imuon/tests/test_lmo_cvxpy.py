"""The closed-form intrinsic LMOs solve their tangent-space problems (cvxpy as the reference).

For every manifold x norm, the problem ``min <egrad, xi> s.t. xi tangent, N(L_x xi) <= 1`` is
posed in cvxpy with the tangent constraints written directly (no projections of the package)
and ``L_x`` built independently (orthogonal complements from scipy, symmetric square roots
instead of QR frames). Our direction must be feasible (tangent, intrinsic norm 1) and reach the
solver's optimum to 1e-5 relative.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla
import torch

from imuon.lmo import fixed_rank_lmo, grassmann_lmo, spd_lmo, stiefel_lmo
from shared_core.manifolds import SPD, FixedRankFactored, Grassmann, Stiefel

cp = pytest.importorskip("cvxpy")

NORMS = ["spectral", "frobenius", "nuclear"]


def _cp_norm(blocks, norm):
    rows = []
    for i, b in enumerate(blocks):
        row = []
        for j, c in enumerate(blocks):
            row.append(b if i == j else np.zeros((b.shape[0], c.shape[1])))
        rows.append(row)
    big = cp.bmat(rows)
    if norm == "spectral":
        return cp.sigma_max(big)
    if norm == "nuclear":
        return cp.normNuc(big)
    return cp.norm(big, "fro")


def _np_norm(blocks, norm):
    s = np.concatenate([np.linalg.svd(b, compute_uv=False) for b in blocks])
    return {"spectral": s.max(), "nuclear": s.sum(), "frobenius": np.sqrt((s**2).sum())}[norm]


def _solve(objective, constraints):
    prob = cp.Problem(cp.Minimize(objective), constraints)
    prob.solve(solver="CLARABEL")
    assert prob.status == "optimal", prob.status
    return prob.value


def _check(ours_obj, ref_obj, norm_value):
    assert ours_obj == pytest.approx(ref_obj, rel=1e-5)
    assert norm_value == pytest.approx(1.0, rel=1e-8)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("metric", ["euclidean", "canonical"])
@pytest.mark.parametrize(("n", "p"), [(7, 3), (5, 3)])
def test_stiefel(norm, metric, n, p):
    gen = torch.Generator().manual_seed(n * 10 + p)
    St = Stiefel(n, p, metric=metric)
    X = St.random_point(generator=gen, dtype=torch.float64)
    G = torch.randn(n, p, generator=gen, dtype=torch.float64)
    xi = stiefel_lmo(X, St.egrad2rgrad(X, G), norm, metric=metric)
    St.check_tangent(X, xi)
    Xn, Gn, xin = X.numpy(), G.numpy(), xi.numpy()
    Xp = sla.null_space(Xn.T)
    c = 1.0 if metric == "euclidean" else 1.0 / np.sqrt(2.0)

    V = cp.Variable((n, p))
    ref = _solve(
        cp.sum(cp.multiply(Gn, V)),
        [Xn.T @ V + V.T @ Xn == 0, _cp_norm([c * (Xn.T @ V), Xp.T @ V], norm) <= 1],
    )
    _check(float((Gn * xin).sum()), ref, _np_norm([c * Xn.T @ xin, Xp.T @ xin], norm))


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize(("n", "p"), [(7, 3), (5, 3)])
def test_grassmann(norm, n, p):
    gen = torch.Generator().manual_seed(n * 10 + p)
    Gr = Grassmann(n, p)
    X = Gr.random_point(generator=gen, dtype=torch.float64)
    G = torch.randn(n, p, generator=gen, dtype=torch.float64)
    xi = grassmann_lmo(X, Gr.egrad2rgrad(X, G), norm)
    Gr.check_tangent(X, xi)
    Xn, Gn, xin = X.numpy(), G.numpy(), xi.numpy()
    Xp = sla.null_space(Xn.T)
    V = cp.Variable((n, p))
    ref = _solve(cp.sum(cp.multiply(Gn, V)), [Xn.T @ V == 0, _cp_norm([Xp.T @ V], norm) <= 1])
    _check(float((Gn * xin).sum()), ref, _np_norm([Xp.T @ xin], norm))


@pytest.mark.parametrize("norm", NORMS)
def test_spd(norm):
    gen = torch.Generator().manual_seed(3)
    M = SPD(4)
    X = M.random_point(generator=gen, dtype=torch.float64)
    G = torch.randn(4, 4, generator=gen, dtype=torch.float64)
    xi = spd_lmo(X, M.egrad2rgrad(X, G), norm)
    M.check_tangent(X, xi)
    Xn, Gn, xin = X.numpy(), G.numpy(), xi.numpy()
    isq = np.real(sla.inv(sla.sqrtm(Xn)))
    V = cp.Variable((4, 4), symmetric=True)
    ref = _solve(cp.sum(cp.multiply(Gn, V)), [_cp_norm([isq @ V @ isq], norm) <= 1])
    _check(float((Gn * xin).sum()), ref, _np_norm([isq @ xin @ isq], norm))


def _fixed_rank_instance(seed, cond):
    gen = torch.Generator().manual_seed(seed)
    F = FixedRankFactored(6, 5, 2)
    x = F.random_point(generator=gen, dtype=torch.float64)
    scale = torch.tensor([1.0, cond], dtype=torch.float64)
    x = type(x)(x.A * scale, x.B / scale)  # badly balanced factors, same matrix class
    G = torch.randn(6, 5, generator=gen, dtype=torch.float64)
    return F, x, G


def _fixed_rank_lift_np(A, B, eA, eB):
    """Independent lift: symmetric square roots and scipy complements (no QR)."""
    ga, gb = A.T @ A, B.T @ B
    sa, sb = np.real(sla.sqrtm(ga)), np.real(sla.sqrtm(gb))
    At, Bt = A @ sla.inv(sa), B @ sla.inv(sb)
    ha, hb = eA @ sb, eB @ sa
    k = 0.5 * (At.T @ ha + hb.T @ Bt)
    return [np.sqrt(2.0) * k, sla.null_space(A.T).T @ ha, sla.null_space(B.T).T @ hb]


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("cond", [1.0, 30.0])
def test_fixed_rank(norm, cond):
    F, x, G = _fixed_rank_instance(5, cond)
    egrad = (G @ x.B, G.mT @ x.A)
    xi = fixed_rank_lmo(x, F.egrad2rgrad(x, egrad), norm)
    F.check_tangent(x, xi)
    A, B = x.A.numpy(), x.B.numpy()
    ga_n, gb_n = egrad[0].numpy(), egrad[1].numpy()
    VA, VB = cp.Variable(A.shape), cp.Variable(B.shape)
    ga, gb = A.T @ A, B.T @ B
    horizontal = sla.inv(ga) @ A.T @ VA == VB.T @ B @ sla.inv(gb)
    sa, sb = np.real(sla.sqrtm(ga)), np.real(sla.sqrtm(gb))
    At, Bt = A @ sla.inv(sa), B @ sla.inv(sb)
    ha, hb = VA @ sb, VB @ sa
    blocks = [
        np.sqrt(2.0) * 0.5 * (At.T @ ha + hb.T @ Bt),
        sla.null_space(A.T).T @ ha,
        sla.null_space(B.T).T @ hb,
    ]
    objective = cp.sum(cp.multiply(ga_n, VA)) + cp.sum(cp.multiply(gb_n, VB))
    ref = _solve(objective, [horizontal, _cp_norm(blocks, norm) <= 1])
    xa, xb = xi.A.numpy(), xi.B.numpy()
    ours = float((ga_n * xa).sum() + (gb_n * xb).sum())
    _check(ours, ref, _np_norm(_fixed_rank_lift_np(A, B, xa, xb), norm))


@pytest.mark.parametrize("norm", NORMS)
def test_fixed_rank_total_lift_is_the_factor_space_lmo(norm):
    F, x, G = _fixed_rank_instance(6, 10.0)
    egrad = (G @ x.B, G.mT @ x.A)
    xi = fixed_rank_lmo(x, F.egrad2rgrad(x, egrad), norm, lift="total")
    A, B = x.A.numpy(), x.B.numpy()
    sa, sb = np.real(sla.sqrtm(A.T @ A)), np.real(sla.sqrtm(B.T @ B))
    VA, VB = cp.Variable(A.shape), cp.Variable(B.shape)
    ga_n, gb_n = egrad[0].numpy(), egrad[1].numpy()
    objective = cp.sum(cp.multiply(ga_n, VA)) + cp.sum(cp.multiply(gb_n, VB))
    ref = _solve(objective, [_cp_norm([VA @ sb, VB @ sa], norm) <= 1])
    xa, xb = xi.A.numpy(), xi.B.numpy()
    ours = float((ga_n * xa).sum() + (gb_n * xb).sum())
    _check(ours, ref, _np_norm([xa @ sb, xb @ sa], norm))
