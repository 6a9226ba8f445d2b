"""Closed forms, Schatten-p optimality (Hölder), tangency and edge cases of the intrinsic LMOs."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
import torch

import imuon.baselines
import imuon.lmo
import imuon.lora
import imuon.norms
import imuon.optim
from imuon.lmo import (
    fixed_rank_lift,
    fixed_rank_lmo,
    fixed_rank_proju,
    fixed_rank_rgrad,
    grassmann_lmo,
    intrinsic_norm,
    spd_lift,
    spd_lmo,
    stiefel_lift,
    stiefel_lmo,
)
from imuon.norms import block_lmo, masked_polar, parse_norm, resolve_polar
from shared_core.manifolds import SPD, Factors, FixedRankFactored, Grassmann, Stiefel

D = torch.float64


@pytest.mark.parametrize("mod", [imuon.lmo, imuon.norms, imuon.optim, imuon.lora, imuon.baselines])
def test_docstring_examples_run(mod):
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0 and res.attempted > 0


def _svd_polar(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    keep = s > 1e-10 * max(s.max(), 1e-300)
    return (u[:, keep]) @ vh[keep]


def test_stiefel_spectral_closed_form():
    gen = torch.Generator().manual_seed(0)
    St = Stiefel(11, 4)
    X = St.random_point(generator=gen, dtype=D)
    G = torch.randn(11, 4, generator=gen, dtype=D)
    xi = stiefel_lmo(X, St.egrad2rgrad(X, G), "spectral").numpy()
    Xn, Gn = X.numpy(), G.numpy()
    a = 0.5 * (Xn.T @ Gn - Gn.T @ Xn)
    perp = Gn - Xn @ (Xn.T @ Gn)
    np.testing.assert_allclose(xi, -Xn @ _svd_polar(a) - _svd_polar(perp), atol=1e-12)


def test_spd_spectral_closed_form_and_exp_step_eigenvalues():
    gen = torch.Generator().manual_seed(1)
    M = SPD(5)
    X = M.random_point(generator=gen, dtype=D)
    G = torch.randn(5, 5, generator=gen, dtype=D)
    xi = spd_lmo(X, M.egrad2rgrad(X, G), "spectral")
    # The whitened step is a symmetric involution-like sign: eigenvalues +-1 exactly.
    w = torch.linalg.eigvalsh(spd_lift(X, xi))
    torch.testing.assert_close(w.abs(), torch.ones(5, dtype=D))
    # exp_X(t xi) moves every whitened eigenvalue by exactly e^{+-t}.
    Y = M.expmap(X, 0.3 * xi)
    ev = torch.linalg.eigvals(torch.linalg.solve(X, Y)).real.sort().values
    lo, hi = np.exp(-0.3), np.exp(0.3)
    assert all(min(abs(e - lo), abs(e - hi)) < 1e-10 for e in ev.tolist())


CASES = ["stiefel", "stiefel_canonical", "grassmann", "spd", "fixed_rank"]


def _instance(case, gen):
    if case.startswith("stiefel"):
        metric = "canonical" if case.endswith("canonical") else "euclidean"
        M = Stiefel(8, 3, metric=metric)
        x = M.random_point(generator=gen, dtype=D)
        rg = M.egrad2rgrad(x, torch.randn(8, 3, generator=gen, dtype=D))
        return M, x, rg, "stiefel", {"metric": metric}, lambda r: stiefel_lmo(x, r, N, metric)
    if case == "grassmann":
        M = Grassmann(8, 3)
        x = M.random_point(generator=gen, dtype=D)
        rg = M.egrad2rgrad(x, torch.randn(8, 3, generator=gen, dtype=D))
        return M, x, rg, "grassmann", {}, lambda r: grassmann_lmo(x, r, N)
    if case == "spd":
        M = SPD(4)
        x = M.random_point(generator=gen, dtype=D)
        rg = M.egrad2rgrad(x, torch.randn(4, 4, generator=gen, dtype=D))
        return M, x, rg, "spd", {}, lambda r: spd_lmo(x, r, N)
    M = FixedRankFactored(7, 6, 2)
    x = M.random_point(generator=gen, dtype=D)
    G = torch.randn(7, 6, generator=gen, dtype=D)
    rg = M.egrad2rgrad(x, (G @ x.B, G.mT @ x.A))
    return M, x, rg, "fixed_rank", {}, lambda r: fixed_rank_lmo(x, r, N)


N = ("schatten", 3.0)


@pytest.mark.parametrize("case", CASES)
def test_schatten_p_reaches_the_dual_norm_and_beats_random_feasible_directions(case):
    gen = torch.Generator().manual_seed(7)
    M, x, rg, kind, kw, lmo = _instance(case, gen)
    xi = lmo(rg)
    M.check_tangent(x, xi)
    assert float(intrinsic_norm(kind, x, xi, N, **kw)) == pytest.approx(1.0, rel=1e-10)
    best = float(M.inner(x, rg, xi))
    # Hölder: the minimum is -||L rg||_q with q = 3/2 (the dual Schatten norm).
    assert best == pytest.approx(-float(intrinsic_norm(kind, x, rg, ("schatten", 1.5), **kw)))
    for _ in range(200):
        u = M.random_tangent(x, generator=gen)
        u = (
            type(u)(*[t / intrinsic_norm(kind, x, u, N, **kw) for t in u])
            if kind == ("fixed_rank")
            else u / intrinsic_norm(kind, x, u, N, **kw)
        )
        assert float(M.inner(x, rg, u)) >= best - 1e-12


def test_lifts_are_isometries():
    gen = torch.Generator().manual_seed(3)
    for case in CASES:
        M, x, _, kind, kw, _ = _instance(case, gen)
        u = M.random_tangent(x, generator=gen)
        if kind == "stiefel":
            blocks = stiefel_lift(x, u, **kw)
        elif kind == "fixed_rank":
            blocks = fixed_rank_lift(x, u)
        elif kind == "spd":
            blocks = [spd_lift(x, u)]
        else:
            blocks = [u]
        sq = sum(float((b * b).sum()) for b in blocks)
        assert sq == pytest.approx(float(M.inner(x, u, u)), rel=1e-10), case


def test_qr_route_matches_shared_core_on_fixed_rank():
    gen = torch.Generator().manual_seed(4)
    F = FixedRankFactored(9, 5, 3)
    x = F.random_point(generator=gen, dtype=D)
    e = (torch.randn(9, 3, generator=gen, dtype=D), torch.randn(5, 3, generator=gen, dtype=D))
    for ours, ref in zip(fixed_rank_rgrad(x, e), F.egrad2rgrad(x, e), strict=True):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)
    for ours, ref in zip(fixed_rank_proju(x, e), F.proju(x, e), strict=True):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)


def test_total_lift_is_not_horizontal_but_horizontal_lift_is():
    gen = torch.Generator().manual_seed(5)
    F = FixedRankFactored(8, 7, 3)
    x = F.random_point(generator=gen, dtype=D)
    G = torch.randn(8, 7, generator=gen, dtype=D)
    rg = fixed_rank_rgrad(x, (G @ x.B, G.mT @ x.A))
    assert F.is_tangent(x, fixed_rank_lmo(x, rg, "spectral"))
    assert not F.is_tangent(x, fixed_rank_lmo(x, rg, "spectral", lift="total"))


def test_zero_gradient_gives_zero_step_and_rank_deficient_blocks_stay_in_range():
    gen = torch.Generator().manual_seed(6)
    X = Stiefel(5, 3).random_point(generator=gen, dtype=D)
    for norm in ("spectral", "frobenius", "nuclear", ("schatten", 4)):
        assert float(stiefel_lmo(X, torch.zeros_like(X), norm).abs().max()) == 0.0
    # n < 2p: the normal block has rank <= 2 < p; a skew 3x3 block has a zero singular value.
    A = torch.randn(3, 3, generator=gen, dtype=D)
    P = masked_polar(A - A.mT)
    torch.testing.assert_close(P, -P.mT)
    assert torch.linalg.matrix_rank(P) == 2


def test_unknown_norm_and_lift_raise():
    with pytest.raises(ValueError, match="unknown norm"):
        parse_norm("operator")
    with pytest.raises(ValueError, match="p must be"):
        parse_norm(("schatten", 0.5))
    with pytest.raises(ValueError, match="unknown polar"):
        block_lmo([torch.ones(2, 2)], "spectral", polar="newton")
    x = Factors(torch.randn(4, 2, dtype=D), torch.randn(3, 2, dtype=D))
    with pytest.raises(ValueError, match="unknown fixed-rank lift"):
        fixed_rank_lift(x, x, lift="sideways")
    with pytest.raises(ValueError, match="unknown Stiefel metric"):
        stiefel_lmo(torch.eye(3, 2, dtype=D), torch.zeros(3, 2, dtype=D), metric="round")


@pytest.mark.parametrize(("m", "n"), [(517, 6), (9, 301), (1000, 32)])
def test_auto_polar_of_elongated_float32_blocks_is_the_exact_masked_polar(m, n):
    # "auto" sends elongated float32 CPU blocks (any small side) to the float64 Gram route.
    gen = torch.Generator().manual_seed(31)
    k = min(m, n)
    u = torch.linalg.qr(torch.randn(m, k, generator=gen, dtype=D))[0]
    v = torch.linalg.qr(torch.randn(n, k, generator=gen, dtype=D))[0]
    s = torch.logspace(0, -2, k, dtype=D)
    s[-1] = 0.0  # one exact zero: its direction must map to 0, as in the masked SVD
    G = ((u * s) @ v.mT).float()
    assert resolve_polar("auto", G) == "gram"
    got = block_lmo([G], "spectral", polar="auto")[0].double()
    # Reference: float64 SVD of the float32 matrix with the documented cut-off (max(m, n)
    # float32 epsilons of the largest singular value; the rounded zero sits ~1e-8 above 0).
    uu, ss, vvh = np.linalg.svd(G.double().numpy(), full_matrices=False)
    keep = ss > max(m, n) * np.finfo(np.float32).eps * ss.max()
    assert keep.sum() == k - 1
    want = -torch.from_numpy(uu[:, keep] @ vvh[keep])
    assert float((got - want).abs().max()) < 1e-4
    assert float(torch.linalg.matrix_norm(got, 2)) < 1 + 1e-5
    assert float((got @ v[:, -1]).norm()) < 1e-4  # the zero direction stays zero


@pytest.mark.parametrize(("m", "r"), [(4096, 64), (1031, 7), (300, 300)])
def test_float64_cholesky_qr_frames_are_certified_only_when_provably_accurate(m, r):
    from imuon.lmo import cholesky_qr64

    gen = torch.Generator().manual_seed(41)
    u = torch.linalg.qr(torch.randn(m, r, generator=gen, dtype=D))[0]
    v = torch.linalg.qr(torch.randn(r, r, generator=gen, dtype=D))[0]
    eye = torch.eye(r, dtype=D)
    for cond in (2.0, 1e3):
        A = ((u * torch.logspace(0, -math.log10(cond), r, dtype=D)) @ v.mT).float()
        # The documented certificate: Yamamoto et al.'s bound with kappa taken twice as large.
        delta = 8 * 2 * cond * math.sqrt((m * r + r * (r + 1)) * 2.0**-53)
        expect = delta <= 1 and 5 / 64 * delta**2 <= 2.0**-24
        assert expect == (cond == 2.0)  # the cases are chosen on either side
        got = cholesky_qr64(A)
        assert (got is not None) == expect
        if got is None:
            continue
        q64, r64 = got[0].double(), got[1].double()
        # At least as orthonormal and backward stable as float32 Householder on the same A.
        qh32, rh32 = (t.double() for t in torch.linalg.qr(A))

        def orth(qq):
            return float((qq.mT @ qq - eye).norm())

        def resid(qq, rq, a):
            return float((qq @ rq - a).norm() / a.norm())

        assert orth(q64) <= max(2 * orth(qh32), 4 * r**0.5 * 2.0**-24)
        a64 = A.double()
        assert resid(q64, r64, a64) <= max(2 * resid(qh32, rh32, a64), 4 * r**0.5 * 2.0**-24)
        assert float(torch.triu(r64).sub(r64).abs().max()) == 0.0
        # Same column space as a float64 Householder frame.
        qh = torch.linalg.qr(A.double())[0]
        assert float((qh - q64 @ (q64.mT @ qh)).norm()) < 1e-5
    # Rank deficient: no certificate, and Householder still runs.
    A = torch.randn(m, r, generator=gen)
    A[:, -1] = A[:, 0]
    assert cholesky_qr64(A) is None
