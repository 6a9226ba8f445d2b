"""Measurement operators and the problem's derivatives against dense references (NumPy
einsum on the dense tensors, finite differences, the explicit Jacobian), plus bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from segre import (
    DenseSensing,
    FullObservation,
    RankOneSensing,
    RecoveryProblem,
    UnderdeterminedWarning,
    gaussian_sensing,
    random_rank_one,
    rank_one_sensing,
    spectral_init,
)
from segre.algorithms import conjugate_gradient, gn_direction, tangent_dot
from shared_core.manifolds import CPTensor, Segre, SegreTangent

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
DIMS = [(3, 4, 2), (2, 3, 2, 3), (5, 3)]


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(11)


def make_op(kind, dims, m, gen):
    if kind == "rank-one":
        return rank_one_sensing(dims, m, generator=gen)
    if kind == "dense":
        return gaussian_sensing(dims, m, generator=gen)
    return FullObservation(dims)


def dense_matrix_reference(op) -> np.ndarray:
    """The m x N matrix of the operator built independently from its stored data."""
    if isinstance(op, RankOneSensing):
        rows = []
        for i in range(op.num_measurements):
            t = np.array(1.0)
            for a in op.factors:
                t = np.multiply.outer(t, a[i].numpy())
            rows.append(t.reshape(-1))
        return np.stack(rows)
    if isinstance(op, DenseSensing):
        return op.tensors.numpy().reshape(op.num_measurements, -1)
    return np.eye(op.num_measurements)


KINDS = ["rank-one", "dense", "full"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dims", DIMS)
def test_structured_operator_equals_dense(kind, dims, gen):
    op = make_op(kind, dims, 17, gen)
    A = dense_matrix_reference(op)
    np.testing.assert_allclose(op.to_matrix().numpy(), A, atol=0)
    d, m = len(dims), op.num_measurements
    K = 4
    cp = CPTensor(
        torch.randn(K, generator=gen, dtype=F64),
        tuple(torch.randn(n, K, generator=gen, dtype=F64) for n in dims),
    )
    dense = np.zeros(dims)
    for j in range(K):
        t = np.array(float(cp.weights[j]))
        for f in cp.factors:
            t = np.multiply.outer(t, f[:, j].numpy())
        dense += t
    scale = np.abs(A).max() * np.abs(dense).max() * dense.size
    np.testing.assert_allclose(
        op.forward_cp(cp).numpy(), A @ dense.reshape(-1), atol=10 * EPS * scale
    )
    # Adjoint contractions against the dense A^T r contracted with NumPy.
    us = [torch.randn(n, generator=gen, dtype=F64) for n in dims]
    r = torch.randn(m, generator=gen, dtype=F64)
    adj = (A.T @ r.numpy()).reshape(dims)
    np.testing.assert_allclose(
        op.adjoint_dense(r).numpy(), adj, atol=10 * EPS * np.abs(A).max() * float(r.abs().sum())
    )
    for k, g in enumerate(op.adjoint_contract(r, us)):
        ref = adj
        for j in reversed(range(d)):
            if j != k:
                ref = np.tensordot(ref, us[j].numpy(), axes=([j], [0]))
        tol = 10 * EPS * np.abs(A).max() * float(r.abs().sum()) * dense.size
        np.testing.assert_allclose(g.numpy(), ref, atol=tol)
        # The mode matrix is the same contraction row by row.
        np.testing.assert_allclose((op.mode_matrix(us, k).T @ r).numpy(), ref, atol=tol)


@pytest.mark.parametrize("kind", KINDS)
def test_riemannian_gradient_two_routes_and_finite_differences(kind, gen):
    dims = (3, 4, 2)
    op = make_op(kind, dims, 30, gen)
    man = Segre(dims)
    y = torch.randn(op.num_measurements, generator=gen, dtype=F64)
    prob = RecoveryProblem(op, y)
    x = man.random_point(generator=gen, dtype=F64)
    g = prob.rgrad(x)
    # Route 2: the dense Euclidean gradient A^T r projected by the manifold.
    r = prob.residual(x)
    dense_grad = (op.to_matrix().T @ r).reshape(dims)
    g2 = man.egrad2rgrad(x, dense_grad)
    assert_close(g.scale, g2.scale)
    for a, b in zip(g.vecs, g2.vecs, strict=True):
        assert_close(a, b)
    # Route 3: central differences of the loss along the retraction.
    for _ in range(3):
        u = man.random_tangent(x, generator=gen)
        nu = float(man.norm(x, u))
        u = SegreTangent(u.scale / nu, tuple(w / nu for w in u.vecs))
        h = 1e-5

        def f(t, u=u):
            return prob.loss(man.retr(x, SegreTangent(t * u.scale, tuple(t * w for w in u.vecs))))

        fd = (f(h) - f(-h)) / (2 * h)
        exact = float(tangent_dot(g, u))
        assert abs(fd - exact) <= 1e-6 * (1 + abs(exact) + prob.loss(x))


@pytest.mark.parametrize("kind", ["rank-one", "dense"])
def test_gauss_newton_two_routes(kind, gen):
    # The matrix-free operator P_T A^* A P_T equals J^T J in the orthonormal coordinates of
    # the explicit Jacobian, and CG on it reaches the QR least-squares step.
    dims = (3, 4, 3)
    op = make_op(kind, dims, 40, gen)
    man = Segre(dims)
    prob = RecoveryProblem(op, torch.randn(40, generator=gen, dtype=F64))
    x = man.random_point(generator=gen, dtype=F64)
    jac, bases = prob.jacobian(x)
    assert jac.shape == (40, man.dim)
    coords = torch.randn(man.dim, generator=gen, dtype=F64)
    xi = prob.tangent_from_coords(coords, bases)
    man.check_tangent(x, xi)
    # A(xi) two ways: the Jacobian and the dense matrix on the dense tangent tensor.
    dense_xi = man.tangent_to_dense(x, xi).reshape(-1)
    assert_close(jac @ coords, op.to_matrix() @ dense_xi)
    hv = prob.gn_matvec(x, xi)
    hv_coords = jac.T @ (jac @ coords)
    assert_close(prob.tangent_from_coords(hv_coords, bases).scale, hv.scale)
    for a, b in zip(prob.tangent_from_coords(hv_coords, bases).vecs, hv.vecs, strict=True):
        assert_close(a, b)
    r = prob.residual(x)
    exact = gn_direction(prob, x, r, solver="exact")
    cg = gn_direction(prob, x, r, solver="cg", cg_tol=1e-13, cg_maxiter=500)
    normal = gn_direction(prob, x, r, solver="normal")
    cond = float(torch.linalg.cond(jac))
    # Normal equations: error ~ eps cond^2 relative; QR: eps cond. 1e3 eps cond^2 bounds both.
    tol = 1e3 * EPS * cond**2 * float(tangent_dot(exact, exact).sqrt())
    assert abs(float(normal.scale - exact.scale)) <= tol
    for a, b in zip(normal.vecs, exact.vecs, strict=True):
        assert float((a - b).norm()) <= tol
    diff = SegreTangent(
        exact.scale - cg.scale, tuple(a - b for a, b in zip(exact.vecs, cg.vecs, strict=True))
    )
    assert float(tangent_dot(diff, diff).sqrt()) <= 1e-9 * cond**2 * float(
        tangent_dot(exact, exact).sqrt()
    )


def test_conjugate_gradient_solves_a_tangent_system(gen):
    man = Segre((4, 3))
    x = man.random_point(generator=gen, dtype=F64)
    B = torch.randn(12, 12, generator=gen, dtype=F64)
    H = B @ B.T + torch.eye(12, dtype=F64)

    def matvec(u):
        return man.proju(x, (H @ man.tangent_to_dense(x, u).reshape(-1)).reshape(4, 3))

    rhs = man.random_tangent(x, generator=gen)
    xi, its = conjugate_gradient(matvec, rhs, tol=1e-13, maxiter=100)
    res = matvec(xi)
    err = SegreTangent(
        res.scale - rhs.scale, tuple(a - b for a, b in zip(res.vecs, rhs.vecs, strict=True))
    )
    assert float(tangent_dot(err, err).sqrt()) <= 1e-10 * float(tangent_dot(rhs, rhs).sqrt())
    assert its <= man.dim + 1  # exact arithmetic would need at most dim steps


def test_rank_one_sensing_never_forms_the_dense_tensor(gen):
    # 1000^4 entries would be 8 TB dense in float64 (no machine allocates that, so forming it
    # anywhere raises); every primitive must stay O(m sum n).
    dims = (1000, 1000, 1000, 1000)
    m = 8
    op = rank_one_sensing(dims, m, generator=gen)
    x = random_rank_one(dims, generator=gen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnderdeterminedWarning)
        prob = RecoveryProblem(op, op.forward(x.scale, x.factors))
    g = prob.rgrad(x)
    assert float(tangent_dot(g, g)) < 1e-20  # the truth is stationary
    xi = prob.manifold.random_tangent(x, generator=gen)
    hv = prob.gn_matvec(x, xi)
    assert hv.vecs[0].shape == (1000,)
    x0 = spectral_init(prob, method="power", sweeps=2, starts=1, generator=gen)
    assert x0.factors[3].shape == (1000,)
    # A Gauss-Newton step and a retraction at this size as well.
    from segre.algorithms import gn_direction

    step = gn_direction(prob, x, prob.residual(x), solver="cg", cg_maxiter=5)
    assert prob.manifold.is_point(prob.manifold.retr(x, step))


# ---------------------------------------------------------------------------- bad input
def test_non_finite_measurements_raise(gen):
    op = gaussian_sensing((3, 4), 20, generator=gen)
    y = torch.randn(20, generator=gen, dtype=F64)
    y[3] = float("nan")
    y[7] = float("inf")
    with pytest.raises(ValueError, match="2 non-finite"):
        RecoveryProblem(op, y)
    with pytest.raises(ValueError, match=r"shape \(20,\)"):
        RecoveryProblem(op, torch.zeros(19, dtype=F64))


def test_too_few_measurements_warn_with_the_count(gen):
    op = gaussian_sensing((5, 5, 5), 10, generator=gen)
    with pytest.warns(UnderdeterminedWarning, match="10 measurements < 13 degrees of freedom"):
        RecoveryProblem(op, torch.randn(10, generator=gen, dtype=F64))


@pytest.mark.parametrize("dims", [(3, 0, 2), (3, 1, 2), (4,)])
def test_bad_dims_raise(dims, gen):
    with pytest.raises(ValueError, match="dims"):
        gaussian_sensing(dims, 10, generator=gen)
    with pytest.raises(ValueError, match="dims"):
        FullObservation(dims)


def test_bad_operator_data_raise(gen):
    a = torch.randn(5, 3, generator=gen, dtype=F64)
    b = torch.randn(5, 4, generator=gen, dtype=F64)
    b[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        RankOneSensing([a, b])
    with pytest.raises(ValueError, match="same m"):
        RankOneSensing([a, torch.randn(6, 4, dtype=F64)])
    with pytest.raises(ValueError, match="shape"):
        DenseSensing(torch.randn(5, 3, dtype=F64))
    with pytest.raises(ValueError, match="int >= 1"):
        gaussian_sensing((3, 4), 0)
    prob = RecoveryProblem(
        gaussian_sensing((3, 4), 20, generator=gen), torch.randn(20, generator=gen, dtype=F64)
    )
    x = random_rank_one((3, 4), generator=gen)
    with pytest.raises(ValueError, match="unknown solver"):
        gn_direction(prob, x, prob.residual(x), solver="lu")


def test_zero_start_and_zero_data_raise(gen):
    from segre import rgd, rgn
    from shared_core.manifolds import SegrePoint

    op = gaussian_sensing((3, 4), 20, generator=gen)
    prob = RecoveryProblem(op, torch.randn(20, generator=gen, dtype=F64))
    x = random_rank_one((3, 4), generator=gen)
    zero = SegrePoint(torch.zeros(1, dtype=F64), x.factors)
    with pytest.raises(ValueError, match="zero tensor"):
        rgn(prob, zero)
    with pytest.raises(ValueError, match="zero tensor"):
        rgd(prob, zero)
    with pytest.raises(ValueError, match="zero"):
        spectral_init(RecoveryProblem(op, torch.zeros(20, dtype=F64)))
