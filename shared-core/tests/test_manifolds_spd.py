"""SPD beyond the conformance suite: closed forms against SciPy, affine invariance, parallel
transport, the positive-definiteness of the second-order retraction, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch

from shared_core.manifolds import SPD

F64 = torch.float64
METRICS = ["affine", "log_euclidean"]


def gauss(*shape, gen):
    return torch.randn(shape, generator=gen, dtype=F64)


def spd_ill_conditioned(n, cond, gen):
    q = torch.linalg.qr(gauss(n, n, gen=gen))[0]
    w = torch.logspace(0, np.log10(cond), n, dtype=F64)
    return (q * w) @ q.mT


def test_affine_closed_forms_match_scipy(gen):
    M = SPD(5)
    x, y = M.random_point(2, generator=gen, dtype=F64)
    u = M.random_tangent(x, generator=gen)
    s = scipy.linalg.sqrtm(x.numpy()).real
    si = np.linalg.inv(s)
    np.testing.assert_allclose(
        M.expmap(x, u).numpy(), s @ scipy.linalg.expm(si @ u.numpy() @ si) @ s, atol=1e-10
    )
    np.testing.assert_allclose(
        M.logmap(x, y).numpy(), s @ scipy.linalg.logm(si @ y.numpy() @ si).real @ s, atol=1e-10
    )
    gen_eigs = scipy.linalg.eigvalsh(y.numpy(), x.numpy())  # eigenvalues of X^-1 Y
    np.testing.assert_allclose(float(M.dist(x, y)), np.linalg.norm(np.log(gen_eigs)), rtol=1e-12)
    xi = np.linalg.inv(x.numpy())
    v = M.random_tangent(x, generator=gen)
    np.testing.assert_allclose(
        float(M.inner(x, u, v)), np.trace(xi @ u.numpy() @ xi @ v.numpy()), rtol=1e-12
    )
    g = gauss(5, 5, gen=gen)
    np.testing.assert_allclose(
        M.egrad2rgrad(x, g).numpy(), x.numpy() @ ((g + g.mT) / 2).numpy() @ x.numpy(), atol=1e-12
    )


def test_log_euclidean_closed_forms_match_scipy(gen):
    M = SPD(5, metric="log_euclidean")
    x, y = M.random_point(2, generator=gen, dtype=F64)
    logx, logy = scipy.linalg.logm(x.numpy()).real, scipy.linalg.logm(y.numpy()).real
    np.testing.assert_allclose(float(M.dist(x, y)), np.linalg.norm(logy - logx), rtol=1e-10)
    u = M.random_tangent(x, generator=gen)
    # Dlog_X[U] by central differences of scipy's logm.
    h = 1e-5
    dlog = (
        scipy.linalg.logm((x + h * u).numpy()).real - scipy.linalg.logm((x - h * u).numpy()).real
    ) / (2 * h)
    np.testing.assert_allclose(float(M.inner(x, u)), np.sum(dlog**2), rtol=1e-7)
    np.testing.assert_allclose(
        M.expmap(x, u).numpy(), scipy.linalg.expm(logx + dlog), rtol=1e-7, atol=1e-7
    )


def test_log_euclidean_metric_is_accurate_for_repeated_eigenvalues(gen):
    # Gamma on ties is 1/w: at X = c I the metric is tr(U V) / c^2, the affine one at c I.
    x = 2.5 * torch.eye(4, dtype=F64)
    x[0, 0] += 1e-13  # a near-tie: the naive divided difference would cancel
    u = SPD(4).random_tangent(x, generator=gen)
    le, af = SPD(4, metric="log_euclidean"), SPD(4)
    torch.testing.assert_close(le.inner(x, u), af.inner(x, u), rtol=1e-11, atol=0)


def test_affine_metric_is_invariant_under_congruence(gen):
    M = SPD(4)
    x, y = M.random_point(2, generator=gen, dtype=F64)
    u, v = M.random_tangent(x, generator=gen), M.random_tangent(x, generator=gen)
    a = gauss(4, 4, gen=gen)  # invertible almost surely

    def cong(t):
        return a @ t @ a.mT

    torch.testing.assert_close(M.inner(cong(x), cong(u), cong(v)), M.inner(x, u, v))
    torch.testing.assert_close(M.dist(cong(x), cong(y)), M.dist(x, y))
    torch.testing.assert_close(M.expmap(cong(x), cong(u)), cong(M.expmap(x, u)))


def test_log_euclidean_distance_is_invariant_under_rotation_and_inversion(gen):
    M = SPD(4, metric="log_euclidean")
    x, y = M.random_point(2, generator=gen, dtype=F64)
    q = torch.linalg.qr(gauss(4, 4, gen=gen))[0]
    torch.testing.assert_close(M.dist(q @ x @ q.mT, q @ y @ q.mT), M.dist(x, y))
    torch.testing.assert_close(M.dist(torch.linalg.inv(x), torch.linalg.inv(y)), M.dist(x, y))


@pytest.mark.parametrize("metric", METRICS)
def test_parallel_transport_is_an_isometry_and_carries_the_geodesic_velocity(metric, gen):
    M = SPD(5, metric=metric)
    x = M.random_point(3, generator=gen, dtype=F64)
    u = M.random_tangent(x, generator=gen)
    v, w = M.random_tangent(x, generator=gen), M.random_tangent(x, generator=gen)
    y = M.expmap(x, u)
    tv, tw = M.transp(x, y, v), M.transp(x, y, w)
    torch.testing.assert_close(M.inner(y, tv, tw), M.inner(x, v, w))
    # Along a geodesic the velocity is parallel: at y it is -log_y(x).
    torch.testing.assert_close(M.transp(x, y, u), -M.logmap(y, x))
    # Transporting back returns the vector.
    torch.testing.assert_close(M.transp(y, x, tv), v)


def test_affine_transport_is_the_e_v_et_closed_form(gen):
    M = SPD(4)
    x, y = M.random_point(2, generator=gen, dtype=F64)
    v = M.random_tangent(x, generator=gen)
    e = scipy.linalg.sqrtm((y @ torch.linalg.inv(x)).numpy()).real  # (Y X^-1)^{1/2}
    np.testing.assert_allclose(M.transp(x, y, v).numpy(), e @ v.numpy() @ e.T, atol=1e-10)


@pytest.mark.parametrize("metric", METRICS)
def test_second_order_retraction_keeps_spd_for_any_step(metric, gen):
    M = SPD(5, metric=metric)
    x = M.random_point(4, generator=gen, dtype=F64)
    # A step of -10 X makes X + U negative definite; the U X^-1 U / 2 term restores it.
    y = M.retr(x, -10 * x)
    M.check_point(y)
    torch.testing.assert_close(y, x - 10 * x + 50 * x)
    u = M.random_tangent(x, generator=gen)
    for s in (1.0, 30.0):
        M.check_point(M.retr(x, s * u))
    xi = torch.linalg.inv(x)
    torch.testing.assert_close(M.retr(x, u), x + u + 0.5 * u @ xi @ u)


def test_second_order_retraction_matches_affine_expmap_to_second_order(gen):
    M = SPD(4)
    x = M.random_point(generator=gen, dtype=F64)
    u = M.random_tangent(x, generator=gen)
    errs = [float((M.retr(x, t * u) - M.expmap(x, t * u)).norm()) for t in (0.04, 0.02, 0.01)]
    assert errs[0] / errs[1] > 7 and errs[1] / errs[2] > 7, errs  # O(t^3)


def test_spd_works_on_ill_conditioned_points(gen):
    M = SPD(5)
    x = spd_ill_conditioned(5, 1e8, gen)
    M.check_point(x)
    u = M.random_tangent(x, generator=gen)
    y = M.expmap(x, u / M.norm(x, u))
    torch.testing.assert_close(M.dist(x, y), torch.tensor(1.0, dtype=F64), rtol=1e-6, atol=0)


def test_proj_returns_a_nearby_spd_matrix(gen):
    M = SPD(4)
    a = gauss(3, 4, 4, gen=gen)
    p = M.proj(a)
    M.check_point(p)
    x = M.random_point(generator=gen, dtype=F64)
    torch.testing.assert_close(M.proj(x), x)


def test_spd_bad_points_and_vectors(gen):
    M = SPD(4)
    x = M.random_point(generator=gen, dtype=F64)
    skew = torch.zeros(4, 4, dtype=F64)
    skew[0, 1], skew[1, 0] = 1e-3, -1e-3
    with pytest.raises(ValueError, match=r"not symmetric"):
        M.check_point(x + skew)
    w, q = torch.linalg.eigh(x)
    w[0] = -0.25
    with pytest.raises(ValueError, match=r"not positive definite: smallest eigenvalue -0\.25"):
        M.check_point((q * w) @ q.mT)
    w[0] = 0.0
    with pytest.raises(ValueError, match="not positive definite"):
        M.check_point((q * w) @ q.mT)
    batch = torch.stack([x, x, (q * w) @ q.mT])
    with pytest.raises(ValueError, match=r"at batch index \(2,\)"):
        M.check_point(batch)
    with pytest.raises(ValueError, match="shape"):
        M.check_point(x[:, :3])
    with pytest.raises(ValueError, match="not symmetric"):
        M.check_tangent(x, skew)
    M.check_tangent(x, M.proju(x, gauss(4, 4, gen=gen)))


def test_spd_constructor_validation():
    with pytest.raises(ValueError, match="unknown metric 'bures'"):
        SPD(3, metric="bures")
    with pytest.raises(ValueError, match="unknown retraction 'cayley'"):
        SPD(3, retraction="cayley")
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        SPD(0)
    assert SPD(5).dim == 15
