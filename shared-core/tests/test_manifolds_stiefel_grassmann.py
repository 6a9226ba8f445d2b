"""Stiefel and Grassmann beyond the conformance suite: long runs, definitions against SciPy,
geodesic equations, and the invariance of Grassmann quantities under a change of basis."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch

from shared_core.manifolds import Grassmann, Stiefel

F64 = torch.float64


def gauss(*shape, gen, dtype=F64):
    return torch.randn(shape, generator=gen, dtype=dtype)


def orthogonal(p, gen):
    return torch.linalg.qr(gauss(p, p, gen=gen))[0]


def projector(x):
    return x @ x.mT


# ---------------------------------------------------------------------------- Stiefel
@pytest.mark.parametrize("metric", ["euclidean", "canonical"])
@pytest.mark.parametrize("retraction", ["qr", "polar"])
def test_stiefel_stays_orthonormal_over_1000_float32_steps(metric, retraction, gen):
    St = Stiefel(7, 3, metric=metric, retraction=retraction)
    x = St.random_point(generator=gen, dtype=torch.float32)
    eye = torch.eye(3)
    worst = 0.0
    for _ in range(1000):
        u = St.random_tangent(x, generator=gen)
        x = St.retr(x, 0.3 * u / St.norm(x, u))
        worst = max(worst, float(torch.linalg.matrix_norm(x.mT @ x - eye)))
    assert x.dtype == torch.float32
    # One retraction's rounding: Householder QR / polar are orthonormal to about m*n*eps; a
    # drift that accumulates over the 1000 steps would be orders of magnitude above it.
    assert worst < 7 * 3 * torch.finfo(torch.float32).eps, worst


def test_stiefel_qr_retraction_is_the_positive_diagonal_qr(gen):
    St = Stiefel(7, 3, retraction="qr")
    # Flipped column signs: LAPACK's QR of such a matrix has a negative diagonal in R.
    x = St.random_point(generator=gen, dtype=F64) * torch.tensor([-1.0, 1.0, -1.0], dtype=F64)
    torch.testing.assert_close(St.retr(x, torch.zeros_like(x)), x)
    u = 0.7 * St.random_tangent(x, generator=gen)
    y = St.retr(x, u)
    q, r = np.linalg.qr((x + u).numpy())
    signs = np.sign(np.diag(r))
    np.testing.assert_allclose(y.numpy(), q * signs, atol=1e-12)
    r_fixed = y.mT @ (x + u)  # upper triangular with a positive diagonal
    assert torch.all(torch.diagonal(r_fixed) > 0)
    torch.testing.assert_close(
        torch.tril(r_fixed, -1), torch.zeros(3, 3, dtype=F64), atol=1e-12, rtol=0
    )


def test_stiefel_polar_retraction_is_the_nearest_orthonormal_matrix(gen):
    St = Stiefel(7, 3, retraction="polar")
    x = St.random_point(4, generator=gen, dtype=F64)
    u = 1.5 * St.random_tangent(x, generator=gen)
    y = St.retr(x, u)
    for i in range(4):
        ref = scipy.linalg.polar((x[i] + u[i]).numpy())[0]
        np.testing.assert_allclose(y[i].numpy(), ref, atol=1e-12)
    # For tangent u, (X + U)^T (X + U) = I + U^T U, so the polar factor is (X+U)(I+U^T U)^-1/2.
    w, q = torch.linalg.eigh(torch.eye(3, dtype=F64) + u.mT @ u)
    torch.testing.assert_close(y, (x + u) @ (q * w.rsqrt().unsqueeze(-2)) @ q.mT)


def _derivatives(curve, t, h=1e-3):
    y = curve(t)
    yp, ym = curve(t + h), curve(t - h)
    return y, (yp - ym) / (2 * h), (yp - 2 * y + ym) / h**2


@pytest.mark.parametrize("metric", ["euclidean", "canonical"])
def test_stiefel_expmap_solves_the_geodesic_equation(metric, gen):
    # Geodesic ODEs of Edelman, Arias and Smith (1998), eqs. (2.7) and (2.41):
    #   euclidean: Y'' + Y (Y'^T Y') = 0
    #   canonical: Y'' + Y' Y'^T Y + Y ((Y^T Y')^2 + Y'^T Y') = 0
    St = Stiefel(7, 3, metric=metric)
    x = St.random_point(generator=gen, dtype=F64)
    u = St.random_tangent(x, generator=gen)
    u = u / St.norm(x, u)
    speed0 = float(St.norm(x, u))
    for t in (0.3, 1.1):
        y, yd, ydd = _derivatives(lambda s: St.expmap(x, s * u), t)
        if metric == "euclidean":
            residual = ydd + y @ (yd.mT @ yd)
        else:
            ytyd = y.mT @ yd
            residual = ydd + yd @ yd.mT @ y + y @ (ytyd @ ytyd + yd.mT @ yd)
        # Central differences with h = 1e-3 are accurate to ~h^2 = 1e-6 here.
        assert float(residual.abs().max()) < 1e-5
        assert abs(float(St.norm(y, yd)) - speed0) < 1e-6  # geodesics have constant speed
        St.check_point(y)


def test_stiefel_canonical_metric_halves_the_vertical_part(gen):
    x = Stiefel(7, 3).random_point(generator=gen, dtype=F64)
    can, euc = Stiefel(7, 3, metric="canonical"), Stiefel(7, 3)
    k = gauss(3, 3, gen=gen)
    along = x @ (k - k.mT)  # X Omega, Omega skew
    across = euc.proju(x, gauss(7, 3, gen=gen))
    across = across - x @ (x.mT @ across)  # X_perp B
    torch.testing.assert_close(can.inner(x, along), 0.5 * euc.inner(x, along))
    torch.testing.assert_close(can.inner(x, across), euc.inner(x, across))
    torch.testing.assert_close(
        can.inner(x, along, across), torch.tensor(0.0, dtype=F64), atol=1e-12, rtol=0
    )


def test_stiefel_square_case_is_the_orthogonal_group(gen):
    St = Stiefel(4, 4)
    assert St.dim == 6
    x = St.random_point(generator=gen, dtype=F64)
    k = gauss(4, 4, gen=gen)
    omega = 0.5 * (k - k.mT)
    # On O(n), the Euclidean-metric geodesic is X expm(Omega).
    torch.testing.assert_close(St.expmap(x, x @ omega), x @ torch.linalg.matrix_exp(omega))


def test_stiefel_bad_points_and_vectors(gen):
    St = Stiefel(7, 3)
    x = St.random_point(generator=gen, dtype=F64)
    with pytest.raises(ValueError, match=r"max \|X\^T X - I\| = 0\.0201"):
        St.check_point(1.01 * x)
    with pytest.raises(ValueError, match="shape"):
        St.check_point(x.mT)
    with pytest.raises(ValueError, match=r"worst at batch index \(1,\)"):
        St.check_point(torch.stack([x, 2 * x, x]))
    with pytest.raises(ValueError, match=r"sym\(X\^T U\)"):
        St.check_tangent(x, x)  # the normal direction X S with S = I
    St.check_tangent(x, St.proju(x, x))


def test_stiefel_constructor_validation():
    with pytest.raises(ValueError, match="p <= n"):
        Stiefel(3, 4)
    with pytest.raises(ValueError, match="'riemannian'"):
        Stiefel(4, 2, metric="riemannian")
    with pytest.raises(ValueError, match="'cayley'"):
        Stiefel(4, 2, retraction="cayley")
    with pytest.raises(ValueError, match="n must be an integer >= 1, got 0"):
        Stiefel(0, 0)
    with pytest.raises(ValueError, match="p must be an integer"):
        Stiefel(4, 2.0)
    assert Stiefel(7, 3).dim == 21 - 6


# ---------------------------------------------------------------------------- Grassmann
@pytest.mark.parametrize("retraction", ["polar", "qr"])
def test_grassmann_quantities_are_invariant_to_a_change_of_basis(retraction, gen):
    Gr = Grassmann(7, 3, retraction=retraction)
    x, y = Gr.random_point(2, generator=gen, dtype=F64)
    u, v = Gr.random_tangent(x, generator=gen), Gr.random_tangent(x, generator=gen)
    q, q2 = orthogonal(3, gen), orthogonal(3, gen)
    xq, uq, vq = x @ q, u @ q, v @ q

    torch.testing.assert_close(Gr.inner(xq, uq, vq), Gr.inner(x, u, v))
    torch.testing.assert_close(Gr.norm(xq, uq), Gr.norm(x, u))
    torch.testing.assert_close(Gr.dist(xq, y @ q2), Gr.dist(x, y))
    a = gauss(7, 3, gen=gen)
    torch.testing.assert_close(Gr.proju(xq, a @ q), Gr.proju(x, a) @ q)
    # The subspace after a step depends only on the subspace and the tangent lift.
    torch.testing.assert_close(projector(Gr.retr(xq, uq)), projector(Gr.retr(x, u)))
    torch.testing.assert_close(projector(Gr.expmap(xq, uq)), projector(Gr.expmap(x, u)))
    torch.testing.assert_close(Gr.logmap(xq, y @ q2), Gr.logmap(x, y) @ q)
    torch.testing.assert_close(Gr.transp(xq, y @ q2, vq), Gr.transp(x, y @ q2, v) @ q)


def test_grassmann_rgrad_of_a_basis_invariant_function_is_equivariant(gen):
    Gr = Grassmann(7, 3)
    s1, s2 = gauss(7, 7, gen=gen), gauss(7, 7, gen=gen)
    s1, s2 = s1 + s1.mT, s2 + s2.mT

    def f(x):  # depends on span(x) only: tr(X^T S X) is unchanged by X -> XQ
        return torch.trace(x.mT @ s1 @ x) + torch.trace(x.mT @ s2 @ x) ** 2

    def egrad(x):
        x = x.clone().requires_grad_(True)
        return torch.autograd.grad(f(x), x)[0]

    x = Gr.random_point(generator=gen, dtype=F64)
    q = orthogonal(3, gen)
    g, gq = egrad(x), egrad(x @ q)
    torch.testing.assert_close(gq, g @ q)
    # Invariance forces X^T G to be symmetric: the Euclidean gradient has no vertical part.
    torch.testing.assert_close(x.mT @ g, g.mT @ x)
    torch.testing.assert_close(Gr.egrad2rgrad(x @ q, gq), Gr.egrad2rgrad(x, g) @ q)
    torch.testing.assert_close(
        Gr.norm(x @ q, Gr.egrad2rgrad(x @ q, gq)), Gr.norm(x, Gr.egrad2rgrad(x, g))
    )


def test_grassmann_polar_retraction_is_exactly_equivariant(gen):
    Gr = Grassmann(7, 3)
    x = Gr.random_point(generator=gen, dtype=F64)
    u = Gr.random_tangent(x, generator=gen)
    q = orthogonal(3, gen)
    torch.testing.assert_close(Gr.retr(x @ q, u @ q), Gr.retr(x, u) @ q)


def test_grassmann_dist_matches_scipy_principal_angles(gen):
    Gr = Grassmann(9, 4)
    x, y = Gr.random_point(2, generator=gen, dtype=F64)
    ref = scipy.linalg.subspace_angles(x.numpy(), y.numpy())
    np.testing.assert_allclose(np.sort(Gr.principal_angles(x, y).numpy()), np.sort(ref), atol=1e-12)
    np.testing.assert_allclose(float(Gr.dist(x, y)), np.linalg.norm(ref), atol=1e-12)
    # n < 2p: at least 2p - n angles are zero.
    G2 = Grassmann(5, 4)
    a, b = G2.random_point(2, generator=gen, dtype=F64)
    angles = G2.principal_angles(a, b)
    assert float(angles[:3].abs().max()) < 1e-7


def test_grassmann_dist_is_accurate_for_tiny_angles(gen):
    # arccos of the cosines would give ~1e-8 of noise here; the sine pairing keeps 1e-12.
    Gr = Grassmann(7, 3)
    x = Gr.random_point(generator=gen, dtype=F64)
    u = Gr.random_tangent(x, generator=gen)
    u = u / Gr.norm(x, u)
    for t in (1e-6, 1e-9):
        d = float(Gr.dist(x, Gr.expmap(x, t * u)))
        assert abs(d - t) <= 1e-6 * t


def test_grassmann_logmap_recovers_the_subspace(gen):
    Gr = Grassmann(8, 3)
    x, y = Gr.random_point(2, generator=gen, dtype=F64)
    u = Gr.logmap(x, y)
    Gr.check_tangent(x, u)
    torch.testing.assert_close(projector(Gr.expmap(x, u)), projector(y))
    torch.testing.assert_close(Gr.norm(x, u), Gr.dist(x, y))


def test_grassmann_bad_points_and_vectors(gen):
    Gr = Grassmann(7, 3)
    x = Gr.random_point(generator=gen, dtype=F64)
    with pytest.raises(ValueError, match="not a basis"):
        Gr.check_point(x + 0.01 * gauss(7, 3, gen=gen))
    vertical = x @ torch.tensor([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=F64)
    # A vertical vector is a Stiefel tangent but not horizontal: it moves the basis, not the span.
    Stiefel(7, 3).check_tangent(x, vertical)
    with pytest.raises(ValueError, match="not horizontal"):
        Gr.check_tangent(x, vertical)
    with pytest.raises(ValueError, match="p <= n"):
        Grassmann(2, 3)
    with pytest.raises(ValueError, match="unknown retraction"):
        Grassmann(4, 2, retraction="exp")
    assert Grassmann(7, 3).dim == 12
