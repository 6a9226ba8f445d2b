"""Fixed-rank manifolds beyond the conformance suite: gauge invariance of the factored view
under an ill-conditioned GL(r) element, closed forms of the embedded view against NumPy's SVD,
and how the two views meet."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shared_core.manifolds import (
    Factors,
    FixedRankEmbedded,
    FixedRankFactored,
    SVDPoint,
    SVDTangent,
)

# tolerances here follow an error model; `nox -s numerics` reruns them on every BLAS path
pytestmark = pytest.mark.numerics

F64 = torch.float64
EPS = torch.finfo(F64).eps


def gauss(*shape, gen):
    return torch.randn(shape, generator=gen, dtype=F64)


def ill_conditioned(r, cond, gen):
    q1 = torch.linalg.qr(gauss(r, r, gen=gen))[0]
    q2 = torch.linalg.qr(gauss(r, r, gen=gen))[0]
    return (q1 * torch.logspace(0, np.log10(cond), r, dtype=F64)) @ q2


def gauge(x, m):
    """The GL(r) action on points and (as its differential) on tangent vectors."""
    return Factors(x[0] @ m, x[1] @ torch.linalg.inv(m).mT)


def rel(a, b) -> float:
    return float((a - b).norm() / b.norm())


# ---------------------------------------------------------------------------- factored
@pytest.fixture
def factored_setup(gen):
    F = FixedRankFactored(9, 6, 2)
    x = F.random_point(generator=gen, dtype=F64)
    m = ill_conditioned(2, 1e4, gen)
    assert 0.9e4 < float(torch.linalg.cond(m)) < 1.1e4
    return F, x, m


# With cond(M) = 1e4 the Gram matrices of the transformed factors have condition ~1e8 x
# cond(A)^2, so solves with them lose up to ~1e8 * eps ~ 2e-8 relative; 1e-6 leaves margin and
# is still 1e10 times below the gauge-dependence that a non-invariant formula would show.
GAUGE_RTOL = 1e-6


def test_metric_is_gauge_invariant(factored_setup, gen):
    F, x, m = factored_setup
    u, v = F.random_tangent(x, generator=gen), F.random_tangent(x, generator=gen)
    xm, um, vm = gauge(x, m), gauge(u, m), gauge(v, m)
    assert rel(F.inner(xm, um, vm), F.inner(x, u, v)) < GAUGE_RTOL
    assert rel(F.norm(xm, um), F.norm(x, u)) < GAUGE_RTOL
    # The Euclidean metric on the factors is not invariant: that is the point of the weights.
    plain = (u[0] * v[0]).sum() + (u[1] * v[1]).sum()
    plain_m = (um[0] * vm[0]).sum() + (um[1] * vm[1]).sum()
    assert rel(plain_m, plain) > 1e-2


def test_retraction_product_is_gauge_invariant(factored_setup, gen):
    F, x, m = factored_setup
    u = F.random_tangent(x, generator=gen)
    before = F.matrix(F.retr(x, u))
    after = F.matrix(F.retr(gauge(x, m), gauge(u, m)))
    assert rel(after, before) < GAUGE_RTOL
    assert rel(F.matrix(gauge(x, m)), F.matrix(x)) < GAUGE_RTOL


def test_horizontal_projection_is_gauge_equivariant(factored_setup, gen):
    F, x, m = factored_setup
    a = Factors(gauss(9, 2, gen=gen), gauss(6, 2, gen=gen))
    projected = F.proju(gauge(x, m), gauge(a, m))
    expected = gauge(F.proju(x, a), m)
    for got, want in zip(projected, expected, strict=True):
        assert rel(got, want) < GAUGE_RTOL
    # Horizontality is a property of the fibre: the transformed vector passes the check.
    F.check_tangent(gauge(x, m), gauge(F.random_tangent(x, generator=gen), m), rtol=GAUGE_RTOL)


def test_riemannian_gradient_is_gauge_covariant(factored_setup, gen):
    F, x, m = factored_setup
    c, t = gauss(9, 6, gen=gen), gauss(9, 6, gen=gen)

    def egrad(p):
        # f(A, B) = <C, A B^T> + ||A B^T - T||^2 / 2, a function of the product only.
        a = p[0].clone().requires_grad_(True)
        b = p[1].clone().requires_grad_(True)
        prod = a @ b.mT
        f = (c * prod).sum() + 0.5 * ((prod - t) ** 2).sum()
        return Factors(*torch.autograd.grad(f, (a, b)))

    rg = F.egrad2rgrad(x, egrad(x))
    rg_m = F.egrad2rgrad(gauge(x, m), egrad(gauge(x, m)))
    for got, want in zip(rg_m, gauge(rg, m), strict=True):
        assert rel(got, want) < GAUGE_RTOL
    # The direction it induces on A B^T does not depend on the representative ...
    direction = F.tangent_matrix(x, rg)
    assert rel(F.tangent_matrix(gauge(x, m), rg_m), direction) < GAUGE_RTOL
    assert rel(F.norm(gauge(x, m), rg_m), F.norm(x, rg)) < GAUGE_RTOL
    # ... and is P_A grad + grad P_B, with P the orthogonal projectors onto the factor ranges.
    a, b = x
    grad = c + (a @ b.mT - t)
    pa = a @ torch.linalg.solve(a.mT @ a, a.mT)
    pb = b @ torch.linalg.solve(b.mT @ b, b.mT)
    assert rel(direction, pa @ grad + grad @ pb) < 1e-12


def test_riemannian_gradient_is_the_weighted_gradient_for_product_functions(gen):
    # For f(A B^T) the Riesz representer (G_A (B^T B)^-1, G_B (A^T A)^-1) is already horizontal.
    F = FixedRankFactored(9, 6, 3)
    x = F.random_point(generator=gen, dtype=F64)
    grad = gauss(9, 6, gen=gen)
    ga, gb = grad @ x.B, grad.mT @ x.A
    rg = F.egrad2rgrad(x, Factors(ga, gb))
    torch.testing.assert_close(rg.A, ga @ torch.linalg.inv(x.B.mT @ x.B))
    torch.testing.assert_close(rg.B, gb @ torch.linalg.inv(x.A.mT @ x.A))


def test_vertical_vectors_are_projected_away(gen):
    F = FixedRankFactored(9, 6, 2)
    x = F.random_point(generator=gen, dtype=F64)
    k = gauss(2, 2, gen=gen)
    vertical = Factors(x.A @ k, -x.B @ k.mT)
    # They move the factors along the fibre and leave A B^T unchanged to first order.
    assert float(F.tangent_matrix(x, vertical).abs().max()) < 1e-12
    for part in F.proju(x, vertical):
        assert float(part.abs().max()) < 1e-12
    a = Factors(gauss(9, 2, gen=gen), gauss(6, 2, gen=gen))
    h = F.proju(x, a)
    torch.testing.assert_close(F.tangent_matrix(x, h), F.tangent_matrix(x, a))
    torch.testing.assert_close(
        F.inner(x, h, vertical), torch.tensor(0.0, dtype=F64), atol=1e-12, rtol=0
    )
    with pytest.raises(ValueError, match="vertical part"):
        F.check_tangent(x, Factors(h.A + vertical.A, h.B + vertical.B))


def test_balance_keeps_the_matrix_and_equalises_the_grams(factored_setup):
    F, x, m = factored_setup
    xm = gauge(x, m)
    bal = F.balance(xm)
    F.check_point(bal)
    torch.testing.assert_close(F.matrix(bal), F.matrix(x))
    ga, gb = bal.A.mT @ bal.A, bal.B.mT @ bal.B
    torch.testing.assert_close(ga, gb)
    torch.testing.assert_close(ga, torch.diag(torch.diagonal(ga)))
    s = torch.linalg.svdvals(F.matrix(x))[:2]
    torch.testing.assert_close(torch.diagonal(ga), s)


def test_factored_bad_points_and_vectors(gen):
    F = FixedRankFactored(9, 6, 2)
    x = F.random_point(generator=gen, dtype=F64)
    rank_one = Factors(x.A[:, :1].repeat(1, 2), x.B)
    with pytest.raises(ValueError, match="A has numerical rank below 2"):
        F.check_point(rank_one)
    with pytest.raises(ValueError, match="B has numerical rank below 2"):
        F.check_point(Factors(x.A, torch.zeros_like(x.B)))
    with pytest.raises(ValueError, match=r"factor B must have shape \(\.\.\., 6, 2\)"):
        F.check_point(Factors(x.A, x.B.mT))
    with pytest.raises(ValueError, match="share batch dims"):
        F.check_point(Factors(x.A.expand(3, 9, 2), x.B))
    with pytest.raises(ValueError, match="2-tuple"):
        F.check_point((x.A,))
    with pytest.raises(ValueError, match="2-tuple"):
        F.check_point(x.A)
    with pytest.raises(ValueError, match="point's shapes"):
        F.check_tangent(x, Factors(x.A[None], x.B[None]))
    assert F.proj((x.A, x.B)) == x  # any full-rank pair is already a point
    assert isinstance(F.retr((x.A, x.B), (x.A, x.B)), Factors)


@pytest.mark.parametrize("cls", [FixedRankFactored, FixedRankEmbedded])
def test_fixed_rank_constructor_validation(cls):
    with pytest.raises(ValueError, match=r"r <= min\(m, n\); got m=5, n=3, r=4"):
        cls(5, 3, 4)
    with pytest.raises(ValueError, match="r must be an integer >= 1, got 0"):
        cls(5, 3, 0)
    with pytest.raises(ValueError, match="m must be an integer"):
        cls(-1, 3, 1)
    assert cls(9, 6, 2).dim == (9 + 6 - 2) * 2


# ---------------------------------------------------------------------------- embedded
@pytest.mark.parametrize(("m", "n", "r"), [(9, 6, 2), (5, 4, 3), (6, 6, 6)])
def test_embedded_projection_and_retraction_match_dense_formulas(m, n, r, gen):
    E = FixedRankEmbedded(m, n, r)
    x = E.random_point(generator=gen, dtype=F64)
    u, v = x.U, x.V
    z = gauss(m, n, gen=gen)
    xi = E.proju(x, z)
    pu, pv = torch.eye(m, dtype=F64) - u @ u.mT, torch.eye(n, dtype=F64) - v @ v.mT
    torch.testing.assert_close(E.tangent_to_dense(x, xi), z - pu @ z @ pv)
    torch.testing.assert_close(E.inner(x, xi, z), (E.tangent_to_dense(x, xi) * z).sum())
    torch.testing.assert_close(E.inner(x, xi, xi), (E.tangent_to_dense(x, xi) ** 2).sum())
    # Retraction: the best rank-r approximation of X + xi, from NumPy's dense SVD.
    y = E.retr(x, xi)
    E.check_point(y)
    uu, ss, vh = np.linalg.svd((E.to_dense(x) + E.tangent_to_dense(x, xi)).numpy())
    best = (uu[:, :r] * ss[:r]) @ vh[:r]
    np.testing.assert_allclose(E.to_dense(y).numpy(), best, atol=1e-10)
    assert torch.all(torch.diagonal(y.S) > 0)
    torch.testing.assert_close(y.S, torch.diag(torch.diagonal(y.S)))


def test_embedded_retraction_with_rank_deficient_parts(gen):
    # Up = Vp = 0 (a step inside span(U) x span(V)): the core QR sees zero columns.
    E = FixedRankEmbedded(9, 6, 2)
    x = E.random_point(generator=gen, dtype=F64)
    xi = SVDTangent(
        gauss(2, 2, gen=gen) * 0.1, torch.zeros(9, 2, dtype=F64), torch.zeros(6, 2, dtype=F64)
    )
    y = E.retr(x, xi)
    E.check_point(y)
    torch.testing.assert_close(E.to_dense(y), x.U @ (x.S + xi.M) @ x.V.mT)


def test_embedded_proj_is_eckart_young_and_reorthonormalises(gen):
    E = FixedRankEmbedded(7, 5, 2)
    z = gauss(7, 5, gen=gen)
    p = E.proj(z)
    E.check_point(p)
    uu, ss, vh = np.linalg.svd(z.numpy())
    np.testing.assert_allclose(E.to_dense(p).numpy(), (uu[:, :2] * ss[:2]) @ vh[:2], atol=1e-12)
    # An SVDPoint with skewed factors and a full S: same matrix, canonical form.
    skewed = SVDPoint(gauss(7, 2, gen=gen), gauss(2, 2, gen=gen), gauss(5, 2, gen=gen))
    fixed = E.proj(skewed)
    E.check_point(fixed)
    torch.testing.assert_close(E.to_dense(fixed), skewed.U @ skewed.S @ skewed.V.mT)


def test_embedded_transport_equals_dense_projection(gen):
    E = FixedRankEmbedded(9, 6, 2)
    x = E.random_point(generator=gen, dtype=F64)
    y = E.retr(x, E.random_tangent(x, generator=gen))
    v = E.random_tangent(x, generator=gen)
    w = E.transp(x, y, v)
    dense = E.proju(y, E.tangent_to_dense(x, v))
    for a, b in zip(w, dense, strict=True):
        torch.testing.assert_close(a, b)


def test_embedded_bad_points_and_vectors(gen):
    E = FixedRankEmbedded(9, 6, 2)
    x = E.random_point(generator=gen, dtype=F64)
    with pytest.raises(ValueError, match="S has numerical rank below 2"):
        E.check_point(SVDPoint(x.U, torch.diag(torch.tensor([1.0, 0.0], dtype=F64)), x.V))
    with pytest.raises(ValueError, match=r"max \|U\^T U - I\|"):
        E.check_point(SVDPoint(2 * x.U, x.S, x.V))
    with pytest.raises(ValueError, match=r"max \|V\^T V - I\|"):
        E.check_point(SVDPoint(x.U, x.S, x.V + 0.1))
    with pytest.raises(ValueError, match="SVDPoint"):
        E.check_point((x.U, x.S))
    with pytest.raises(ValueError, match="SVDTangent"):
        E.check_tangent(x, torch.zeros(9, 6, dtype=F64))  # dense: ambient, not a triple
    u = E.random_tangent(x, generator=gen)
    with pytest.raises(ValueError, match="Up not orthogonal to U"):
        E.check_tangent(x, SVDTangent(u.M, u.Up + x.U, u.Vp))
    with pytest.raises(ValueError, match="Vp not orthogonal to V"):
        E.check_tangent(x, SVDTangent(u.M, u.Up, u.Vp + x.V))


# ---------------------------------------------------------------------------- two views
def test_the_two_views_have_the_same_tangent_spaces(gen):
    F, E = FixedRankFactored(9, 6, 2), FixedRankEmbedded(9, 6, 2)
    xf = F.random_point(generator=gen, dtype=F64)
    xe = E.proj(F.matrix(xf))
    torch.testing.assert_close(E.to_dense(xe), F.matrix(xf))
    # Every horizontal factored vector induces an embedded tangent direction, and back.
    xi = F.random_tangent(xf, generator=gen)
    direction = F.tangent_matrix(xf, xi)
    torch.testing.assert_close(E.tangent_to_dense(xe, E.proju(xe, direction)), direction)
    assert F.dim == E.dim


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_riemannian_gradient_accuracy_follows_cond_not_cond_squared(seed):
    # float32 factors of condition ~1e3; reference: the same float32 numbers in float64, so
    # only the algorithm's own rounding is measured. Error model: QR-coordinate solves lose
    # ~kappa * eps32 ~ 2e-4; Gram solves lose ~kappa^2 * eps32 ~ 0.1 (measured 3e-3..4e-2
    # before the change). Bound: 10 kappa eps32.
    gen = torch.Generator().manual_seed(seed)
    F = FixedRankFactored(11, 7, 3)
    a = (gauss(11, 3, gen=gen) @ ill_conditioned(3, 1e3, gen)).float()
    b = (gauss(7, 3, gen=gen) @ ill_conditioned(3, 1e3, gen)).float()
    ga, gb = gauss(11, 3, gen=gen).float(), gauss(7, 3, gen=gen).float()
    ref = F.egrad2rgrad(Factors(a.double(), b.double()), Factors(ga.double(), gb.double()))
    got = F.egrad2rgrad(Factors(a, b), Factors(ga, gb))
    kappa = max(float(torch.linalg.cond(a.double())), float(torch.linalg.cond(b.double())))
    for g_, r_ in zip(got, ref, strict=True):
        assert g_.dtype == torch.float32
        assert rel(g_.double(), r_) < 10 * kappa * torch.finfo(torch.float32).eps
