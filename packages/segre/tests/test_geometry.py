"""The Segre manifold beyond shared-core's conformance suite, against independent references:
NumPy SVDs for the HOSVD retraction and the d = 2 projection, curve lengths for the closed-form
distance, autograd second derivatives along geodesics for the Hessian."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from segre import frobenius_distance, make_point, random_rank_one
from shared_core.manifolds import Segre, SegrePoint, SegreTangent

F64 = torch.float64


def assert_close(a, b, atol=None, rtol=None):
    """``|a - b| <= atol + rtol |b|`` elementwise (float64 defaults 1e-7 / 1e-7), without
    torch.testing's import cost."""
    atol = 1e-7 if atol is None else atol
    rtol = 1e-7 if rtol is None else rtol
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert bool(((a - b).abs() <= atol + rtol * b.abs()).all()), (a, b)


EPS = torch.finfo(F64).eps


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(7)


def np_dense(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().astype(np.float64)


def np_hosvd_rank_one(T: np.ndarray) -> np.ndarray:
    """Rank-one truncated HOSVD with NumPy: top left singular vector of each unfolding, then
    the core entry."""
    us = []
    for k in range(T.ndim):
        unf = np.moveaxis(T, k, 0).reshape(T.shape[k], -1)
        us.append(np.linalg.svd(unf, full_matrices=False)[0][:, 0])
    core = T
    for u in us:
        core = np.tensordot(core, u, axes=([0], [0]))
    out = core
    for u in us:
        out = np.multiply.outer(out, u)
    return out


@pytest.mark.parametrize("dims", [(4, 3, 5), (2, 6), (3, 2, 4, 3)])
def test_hosvd_retraction_matches_numpy(dims, gen):
    M = Segre(dims)
    x = M.random_point(generator=gen, dtype=F64)
    xi = M.random_tangent(x, generator=gen)
    for s in (0.05, 0.5, 1.5):
        step = SegreTangent(s * xi.scale, tuple(s * w for w in xi.vecs))
        got = np_dense(M.to_dense(M.retr(x, step)))
        ref = np_hosvd_rank_one(np_dense(M.to_dense(x) + M.tangent_to_dense(x, step)))
        # Both compute the same closed form; the SVD's error is ~ eps * size * |X|.
        assert np.abs(got - ref).max() <= 1e3 * EPS * np.abs(ref).max()


def test_factor_retraction_is_the_normalised_factor_update(gen):
    M = Segre((3, 4, 2), retraction="factor")
    x = M.random_point(generator=gen, dtype=F64)
    xi = M.random_tangent(x, generator=gen)
    lam = float(x.scale)
    facs = [u + w / lam for u, w in zip(x.factors, xi.vecs, strict=True)]
    ref = (lam + float(xi.scale)) * np.einsum("a,b,c->abc", *[np_dense(f) for f in facs])
    got = np_dense(M.to_dense(M.retr(x, xi)))
    np.testing.assert_allclose(got, ref, atol=1e-13 * np.abs(ref).max())


def test_proj_of_a_matrix_is_the_best_rank_one_approximation(gen):
    # For d = 2 the metric projection exists in closed form: the top singular triple.
    M = Segre((5, 7))
    Z = torch.randn(5, 7, generator=gen, dtype=F64)
    u, s, vt = np.linalg.svd(np_dense(Z))
    ref = s[0] * np.outer(u[:, 0], vt[0])
    np.testing.assert_allclose(np_dense(M.to_dense(M.proj(Z))), ref, atol=1e-12)


def test_proj_of_a_rank_one_tensor_is_exact(gen):
    M = Segre((3, 4, 5))
    x = M.random_point(generator=gen, dtype=F64)
    y = M.proj(M.to_dense(x))
    assert float(frobenius_distance(x, y)) <= 1e-13 * float(x.scale)


def _curve_length(M, x, u, pieces=2000) -> float:
    ts = torch.linspace(0, 1, pieces + 1, dtype=F64)[:, None]
    xb = SegrePoint(
        x.scale.expand(pieces + 1, 1), tuple(f.expand(pieces + 1, -1) for f in x.factors)
    )
    ub = SegreTangent(ts * u.scale, tuple(ts * w for w in u.vecs))
    pts = M.to_dense(M.expmap(xb, ub)).reshape(pieces + 1, -1)
    return float((pts[1:] - pts[:-1]).norm(dim=1).sum())


def test_distance_two_routes(gen):
    # Route 1: the closed form from the cone structure. Route 2: the Frobenius length of the
    # curve t -> exp_x(t log_x(y)), summed over 2000 chords (chord error O(h^2)).
    M = Segre((3, 4, 3))
    x = M.random_point(generator=gen, dtype=F64)
    for _ in range(3):
        y = M.random_point(generator=gen, dtype=F64)
        u = M.logmap(x, y)
        # The geodesic from the log ends at y (up to the sign gauge: compare dense tensors).
        assert_close(M.to_dense(M.expmap(x, u)), M.to_dense(y), atol=1e-12, rtol=0)
        length = _curve_length(M, x, u)
        assert abs(length - float(M.dist(x, y))) <= 1e-5 * length
        # And the geodesic is no longer than the chord it must beat: |X - Y| <= dist.
        assert float(frobenius_distance(x, y)) <= float(M.dist(x, y)) + 1e-12


def test_distance_ignores_the_sign_gauge(gen):
    M = Segre((3, 4, 3))
    x = M.random_point(generator=gen, dtype=F64)
    y = M.random_point(generator=gen, dtype=F64)
    flipped = SegrePoint(y.scale, (-y.factors[0], y.factors[1], -y.factors[2]))
    assert_close(M.dist(x, y), M.dist(x, flipped))
    assert_close(M.dist(x, x), torch.tensor(0.0, dtype=F64), atol=1e-7, rtol=0)


def test_hessian_matches_second_derivative_along_geodesics(gen):
    # <Hess f(x)[xi], xi> = d^2/dt^2 f(exp_x(t xi)) at 0 (geodesics have no acceleration), by
    # autograd double backward through the closed-form expmap; symmetry by polarisation.
    dims = (3, 4, 2)
    M = Segre(dims)
    x = M.random_point(generator=gen, dtype=F64)
    C = torch.randn(*dims, generator=gen, dtype=F64)
    D = torch.randn(*dims, generator=gen, dtype=F64)

    def f(X):
        return (C * X).sum() + 0.5 * ((D * X) ** 2).sum() + 0.2 * (X**3).sum()

    Xd = M.to_dense(x).clone().requires_grad_(True)
    egrad = torch.autograd.grad(f(Xd), Xd, create_graph=True)[0]

    def hess(u):
        ud = M.tangent_to_dense(x, u)
        ehess = torch.autograd.grad((egrad * ud).sum(), Xd, retain_graph=True)[0]
        return M.ehess2rhess(x, egrad.detach(), ehess, u)

    def second_derivative(u):
        t = torch.zeros((), dtype=F64, requires_grad=True)
        val = f(M.to_dense(M.expmap(x, SegreTangent(t * u.scale, tuple(t * w for w in u.vecs)))))
        (d1,) = torch.autograd.grad(val, t, create_graph=True)
        (d2,) = torch.autograd.grad(d1, t)
        return float(d2)

    for _ in range(3):
        u = M.random_tangent(x, generator=gen)
        v = M.random_tangent(x, generator=gen)
        hu, hv = hess(u), hess(v)
        lhs = float(M.inner(x, hu, u))
        assert abs(lhs - second_derivative(u)) <= 1e-10 * (1 + abs(lhs))
        assert abs(float(M.inner(x, hu, v) - M.inner(x, u, hv))) <= 1e-10 * (1 + abs(lhs))


def test_cp_gradient_equals_dense_gradient(gen):
    # proju of a CPTensor (how rank-one sensing passes A^*(r)) equals proju of its dense form.
    from shared_core.manifolds import CPTensor

    M = Segre((3, 5, 4))
    x = M.random_point(generator=gen, dtype=F64)
    K = 7
    cp = CPTensor(
        torch.randn(K, generator=gen, dtype=F64),
        tuple(torch.randn(n, K, generator=gen, dtype=F64) for n in (3, 5, 4)),
    )
    dense = torch.einsum("z,az,bz,cz->abc", cp.weights, *cp.factors)
    a, b = M.proju(x, cp), M.proju(x, dense)
    assert_close(a.scale, b.scale)
    for p, q in zip(a.vecs, b.vecs, strict=True):
        assert_close(p, q)


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("dims", [(3, 0, 2), (3, 1, 2), (4,), ()])
def test_bad_dims_raise(dims):
    with pytest.raises(ValueError, match="dims"):
        Segre(dims)


def test_zero_tensor_is_not_a_point(gen):
    M = Segre((3, 4))
    x = M.random_point(generator=gen, dtype=F64)
    zero = SegrePoint(torch.zeros(1, dtype=F64), x.factors)
    with pytest.raises(ValueError, match="zero tensor"):
        M.check_point(zero)
    with pytest.raises(ValueError, match="zero"):
        M.proj(torch.zeros(3, 4, dtype=F64))
    with pytest.raises(ValueError, match="zero"):
        make_point(0.0, [torch.ones(3), torch.ones(4)])
    with pytest.raises(ValueError, match="zero"):
        make_point(1.0, [torch.zeros(3), torch.ones(4)])


def test_frobenius_distance_two_routes(gen):
    # Far apart: the expanded formula; nearby (1e-9 apart, where it cancels): the telescoped
    # sum. Both against the dense norm.
    dims = (4, 3, 5)
    M = Segre(dims)
    x = random_rank_one(dims, scale=2.0, generator=gen)
    y = random_rank_one(dims, scale=1.5, generator=gen)
    dense = float((M.to_dense(x) - M.to_dense(y)).norm())
    assert math.isclose(float(frobenius_distance(x, y)), dense, rel_tol=1e-12)
    xi = M.random_tangent(x, generator=gen)
    step = SegreTangent(1e-9 * xi.scale, tuple(1e-9 * w for w in xi.vecs))
    z = M.retr(x, step)
    z = SegrePoint(z.scale, (-z.factors[0], -z.factors[1], z.factors[2]))  # a gauge move
    dense = float((M.to_dense(x) - M.to_dense(z)).norm())
    # The dense difference itself carries ~eps |X| ~ 4e-16 absolute error.
    assert abs(float(frobenius_distance(x, z)) - dense) <= 1e-14
    assert dense > 1e-10
