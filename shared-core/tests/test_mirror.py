"""The math of shared_core.mirror against closed forms, scipy.optimize and brute force.

The references below (potentials, divergences, objectives) are written in numpy from the
definitions, independently of the library. Everything runs in float64 on small random
instances (d = 5..7) so that scipy can solve the constrained problems to high accuracy.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import scipy.special
import scipy.stats
import torch

from shared_core.mirror import Ball, Box, Euclidean, NegEntropy, PNorm

P_VALUES = [1.2, 1.5, 1.9, 2.0]
MAPS = [
    Euclidean(),
    Euclidean(Ball(1.5, center=0.3)),
    Euclidean(Box(-0.5, 0.8)),
    NegEntropy(),
    *[PNorm(p) for p in P_VALUES],
    PNorm(1.5, radius=0.7),
]
every_map = pytest.mark.parametrize("m", MAPS, ids=repr)


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def _simplex(rng: np.random.Generator, *shape: int, zeros: bool = False) -> np.ndarray:
    x = rng.dirichlet(np.ones(shape[-1]), size=shape[:-1]) if len(shape) > 1 else None
    x = rng.dirichlet(np.ones(shape[-1])) if x is None else x
    if zeros:
        x[..., 1] = 0.0
        x /= x.sum(-1, keepdims=True)
    return x


def _point(m, rng: np.random.Generator, *shape: int) -> np.ndarray:
    """A random point where grad_psi is defined (positive on the simplex for entropy)."""
    if isinstance(m, NegEntropy):
        return _simplex(rng, *shape)
    return rng.standard_normal(shape)


# --- numpy references, from the definitions ------------------------------------------------


def _psi_np(m, x: np.ndarray) -> np.ndarray:
    if isinstance(m, Euclidean):
        return 0.5 * (x * x).sum(-1)
    if isinstance(m, NegEntropy):
        return scipy.special.xlogy(x, x).sum(-1)
    return 0.5 * ((np.abs(x) ** m.p).sum(-1)) ** (2 / m.p)


def _grad_np(m, x: np.ndarray) -> np.ndarray:
    if isinstance(m, Euclidean):
        return x
    if isinstance(m, NegEntropy):
        return 1 + np.log(x)
    n = (np.abs(x) ** m.p).sum(-1, keepdims=True) ** (1 / m.p)
    return np.sign(x) * np.abs(x) ** (m.p - 1) * n ** (2 - m.p)


def _bregman_np(m, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return _psi_np(m, x) - _psi_np(m, y) - (_grad_np(m, y) * (x - y)).sum(-1)


def _minimize(m, fun, jac, x0: np.ndarray) -> np.ndarray:
    """argmin of ``fun`` over the domain of ``m`` by SLSQP (bounds/constraints per domain)."""
    d = x0.size
    bounds, cons = None, []
    if isinstance(m, NegEntropy):
        bounds = [(1e-15, 1.0)] * d
        cons = [{"type": "eq", "fun": lambda z: z.sum() - 1, "jac": lambda z: np.ones(d)}]
    elif isinstance(m, Euclidean) and isinstance(m.domain, Box):
        bounds = [(m.domain.lo, m.domain.hi)] * d
    elif isinstance(m, Euclidean) and isinstance(m.domain, Ball):
        c, r = m.domain.center, m.domain.radius
        cons = [
            {
                "type": "ineq",
                "fun": lambda z: r**2 - ((z - c) ** 2).sum(),
                "jac": lambda z: -2 * (z - c),
            }
        ]
    elif isinstance(m, PNorm) and m.radius is not None:

        def lp(z):
            return (np.abs(z) ** m.p).sum() ** (1 / m.p)

        cons = [
            {
                "type": "ineq",
                "fun": lambda z: m.radius - lp(z),
                "jac": lambda z: -np.sign(z) * (np.abs(z) / lp(z)) ** (m.p - 1),
            }
        ]
    res = scipy.optimize.minimize(
        fun,
        x0,
        jac=jac,
        method="SLSQP",
        bounds=bounds,
        constraints=cons,
        options={"ftol": 1e-13, "maxiter": 500},
    )
    # Status 8 ("positive directional derivative") is SLSQP running out of line-search
    # precision next to the optimum; its point is then still good if it is feasible.
    assert res.status in (0, 8), res.message
    for con in cons:
        value = con["fun"](res.x)
        assert (abs(value) if con["type"] == "eq" else -value) <= 1e-8, (con["type"], value)
    return res.x


def _no_worse(ours: float, ref: float) -> bool:
    """ours <= ref, up to the slack that ref's own 1e-8-level infeasibility can buy it."""
    return ours <= ref + 1e-7 * (1 + abs(ref))


# --- gradient maps ------------------------------------------------------------------------


@every_map
def test_grad_psi_star_inverts_grad_psi(m):
    rng = np.random.default_rng(1)
    x = _t(_point(m, rng, 4, 6))
    torch.testing.assert_close(m.grad_psi_star(m.grad_psi(x)), x, rtol=1e-12, atol=1e-14)
    theta = _t(rng.standard_normal((4, 6)))
    torch.testing.assert_close(m.grad_psi(m.grad_psi_star(theta)), theta, rtol=1e-12, atol=1e-14)


def test_entropy_maps_keep_zero_entries():
    x = _t(_simplex(np.random.default_rng(2), 5, zeros=True))
    m = NegEntropy()
    assert m.grad_psi(x)[1] == -torch.inf
    torch.testing.assert_close(m.grad_psi_star(m.grad_psi(x)), x, rtol=1e-12, atol=0)


@every_map
def test_grad_psi_matches_numpy_and_finite_differences(m):
    rng = np.random.default_rng(3)
    x = _point(m, rng, 6)
    np.testing.assert_allclose(m.grad_psi(_t(x)).numpy(), _grad_np(m, x), rtol=1e-12)
    np.testing.assert_allclose(m.psi(_t(x)).numpy(), _psi_np(m, x), rtol=1e-12)
    h = 1e-6
    fd = np.array([(_psi_np(m, x + h * e) - _psi_np(m, x - h * e)) / (2 * h) for e in np.eye(6)])
    np.testing.assert_allclose(m.grad_psi(_t(x)).numpy(), fd, rtol=1e-6, atol=1e-8)


@every_map
def test_fenchel_young(m):
    rng = np.random.default_rng(4)
    x, theta = _t(_point(m, rng, 50, 6)), _t(rng.standard_normal((50, 6)))
    # psi(x) + psi*(theta) >= <x, theta>, with equality exactly at theta = grad psi(x).
    assert torch.all(m.psi(x) + m.psi_star(theta) >= (x * theta).sum(-1) - 1e-12)
    g = m.grad_psi(x)
    torch.testing.assert_close(m.psi(x) + m.psi_star(g), (x * g).sum(-1), rtol=1e-12, atol=1e-12)


# --- Bregman divergences ------------------------------------------------------------------


@every_map
def test_bregman_is_nonnegative_and_zero_only_on_the_diagonal(m):
    rng = np.random.default_rng(5)
    x, y = _t(_point(m, rng, 200, 6)), _t(_point(m, rng, 200, 6))
    d = m.bregman(x, y)
    assert d.shape == (200,) and torch.all(d > 0)
    assert torch.all(m.bregman(x, x) == 0)


@every_map
def test_bregman_equals_an_independent_numerical_reference(m):
    # psi in numpy and the directional derivative <grad psi(y), x - y> by central differences.
    rng = np.random.default_rng(6)
    for _ in range(5):
        x, y = _point(m, rng, 7), _point(m, rng, 7)
        # Five-point stencil (error O(h^4)): entropy's higher derivatives grow like 1/x^k.
        h = 1e-4

        def f(t, x=x, y=y):
            return _psi_np(m, y + t * (x - y))

        slope = (f(-2 * h) - 8 * f(-h) + 8 * f(h) - f(2 * h)) / (12 * h)
        ref = _psi_np(m, x) - _psi_np(m, y) - slope
        assert m.bregman(_t(x), _t(y)).item() == pytest.approx(ref, rel=1e-7, abs=1e-10)


@every_map
def test_three_point_identity(m):
    rng = np.random.default_rng(7)
    x, y, z = (_t(_point(m, rng, 20, 6)) for _ in range(3))
    lhs = m.bregman(z, x)
    rhs = m.bregman(z, y) + m.bregman(y, x) - ((m.grad_psi(x) - m.grad_psi(y)) * (z - y)).sum(-1)
    torch.testing.assert_close(lhs, rhs, rtol=1e-10, atol=1e-12)


def test_entropy_bregman_is_kl_on_the_simplex():
    rng = np.random.default_rng(8)
    x, y = _simplex(rng, 6, zeros=True), _simplex(rng, 6)
    m = NegEntropy()
    assert m.bregman(_t(x), _t(y)).item() == pytest.approx(scipy.stats.entropy(x, y), rel=1e-12)
    # Off the simplex it is the generalised KL: sum x log(x/y) - x + y.
    a, b = 2.5 * x, 0.4 * y
    ref = scipy.special.rel_entr(a, b).sum() - a.sum() + b.sum()
    assert m.bregman(_t(a), _t(b)).item() == pytest.approx(ref, rel=1e-12)
    y0 = y.copy()
    y0[1:3] = [0.0, 1e-300]
    y0[0] = 1 - y0[1:].sum()
    assert m.bregman(_t(x), _t(y0)).item() == pytest.approx(scipy.stats.entropy(x, y0), rel=1e-9)
    assert m.bregman(_t(y0), _t(x)).item() == pytest.approx(scipy.stats.entropy(y0, x), rel=1e-9)
    assert m.bregman(_t(y), _t(x)) == torch.inf  # x has a zero where y has mass


# --- the entropy step ---------------------------------------------------------------------


def test_entropy_step_is_exponentiated_gradient():
    rng = np.random.default_rng(9)
    x, g = _simplex(rng, 3, 7), rng.standard_normal((3, 7))
    for lr in (0.01, 0.7, 3.0):
        w = x * np.exp(-lr * g)
        ref = w / w.sum(-1, keepdims=True)
        np.testing.assert_allclose(NegEntropy().step(_t(x), _t(g), lr).numpy(), ref, rtol=1e-12)


def test_entropy_step_with_zero_entries_and_huge_exponents():
    rng = np.random.default_rng(10)
    x, g = _simplex(rng, 7, zeros=True), rng.standard_normal(7)
    out = NegEntropy().step(_t(x), _t(g), 1e4)  # exp(-lr g) alone overflows float64
    assert torch.isfinite(out).all() and out[1] == 0
    shifted = x * np.exp(-1e4 * (g - g[x > 0].min()))
    np.testing.assert_allclose(out.numpy(), shifted / shifted.sum(), atol=1e-300)
    assert out.sum().item() == pytest.approx(1.0, abs=1e-15)


# --- Euclidean projections against scipy and brute force ----------------------------------


@pytest.mark.parametrize("d", [5, 6, 7])
def test_ball_projection_matches_scipy_and_sampling(d):
    rng = np.random.default_rng(d)
    m = Euclidean(Ball(0.8, center=0.25))
    for scale in (0.2, 3.0):  # inside (kept) and outside (moved to the sphere)
        y = scale * rng.standard_normal(d)
        ours = m.project(_t(y)).numpy()
        ref = _minimize(
            m, lambda z, y=y: ((z - y) ** 2).sum(), lambda z, y=y: 2 * (z - y), np.zeros(d)
        )
        np.testing.assert_allclose(ours, ref, atol=1e-6)
        z = rng.standard_normal((20000, d))
        z = 0.25 + 0.8 * z / np.linalg.norm(z, axis=1, keepdims=True) * rng.random((20000, 1))
        assert np.linalg.norm(ours - y) <= np.linalg.norm(z - y, axis=1).min() + 1e-12


@pytest.mark.parametrize("d", [5, 6, 7])
def test_box_projection_matches_scipy(d):
    rng = np.random.default_rng(10 + d)
    m = Euclidean(Box(-0.5, 0.8))
    y = 2 * rng.standard_normal(d)
    ref = _minimize(m, lambda z: ((z - y) ** 2).sum(), lambda z: 2 * (z - y), np.zeros(d))
    np.testing.assert_allclose(m.project(_t(y)).numpy(), ref, atol=1e-8)


def test_box_with_per_coordinate_bounds():
    lo, hi = torch.tensor([-1.0, 0.0, 2.0]), torch.tensor([1.0, 0.0, 5.0])
    y = torch.tensor([[3.0, -2.0, 1.0], [0.5, 0.1, 4.0]])
    expected = torch.tensor([[1.0, 0.0, 2.0], [0.5, 0.0, 4.0]])
    torch.testing.assert_close(Box(lo, hi).project(y), expected)


# --- Bregman projections ------------------------------------------------------------------


@pytest.mark.parametrize("d", [5, 6, 7])
def test_simplex_bregman_projection_is_normalisation(d):
    rng = np.random.default_rng(20 + d)
    m = NegEntropy()
    y = rng.random(d) * 3

    def div(z):
        return (scipy.special.xlogy(z, z / y) - z + y).sum()

    ref = _minimize(m, div, lambda z: np.log(z / y), np.full(d, 1 / d))
    np.testing.assert_allclose(m.project(_t(y)).numpy(), ref, atol=1e-6)
    assert _no_worse(m.bregman(m.project(_t(y)), _t(y)).item(), div(ref))


@pytest.mark.parametrize("p", [1.3, 1.7])
def test_pnorm_ball_bregman_projection_is_radial(p):
    m = PNorm(p, radius=0.7)
    rng = np.random.default_rng(30)
    for _ in range(3):
        y = 2 * rng.standard_normal(6)
        ref = _minimize(
            m,
            lambda z, y=y: _bregman_np(m, z, y),
            lambda z, y=y: _grad_np(m, z) - _grad_np(m, y),
            0.1 * y,
        )
        ours = m.project(_t(y)).numpy()
        np.testing.assert_allclose(ours, ref, atol=1e-5)
        assert _no_worse(_bregman_np(m, ours, y), _bregman_np(m, ref, y))


# --- the mirror step is the proximal argmin -----------------------------------------------


@every_map
@pytest.mark.parametrize("d", [5, 7])
def test_step_is_the_argmin_of_the_linearised_proximal_problem(m, d):
    # x+ = argmin_{x' in domain} lr <g, x'> + D_psi(x', x), solved by scipy from the definition.
    rng = np.random.default_rng(40 + d)
    lr = 0.6
    for _ in range(2):
        x, g = _point(m, rng, d), rng.standard_normal(d)
        if isinstance(m, PNorm) and m.radius is not None:
            x *= 0.5 * m.radius / np.linalg.norm(x, m.p)

        def obj(z, x=x, g=g):
            return lr * g @ z + _bregman_np(m, z, x)

        def jac(z, x=x, g=g):
            return lr * g + _grad_np(m, z) - _grad_np(m, x)

        x0 = np.full(d, 1 / d) if isinstance(m, NegEntropy) else np.zeros(d) + 0.01
        ref = _minimize(m, obj, jac, x0)
        ours = m.step(_t(x), _t(g), lr).numpy()
        assert _no_worse(obj(ours), obj(ref))
        np.testing.assert_allclose(ours, ref, atol=1e-5)


@every_map
def test_step_is_batched_row_by_row(m):
    rng = np.random.default_rng(50)
    x, g = _t(_point(m, rng, 3, 6)), _t(rng.standard_normal((3, 6)))
    batched = m.step(x, g, 0.3)
    rows = torch.stack([m.step(x[i], g[i], 0.3) for i in range(3)])
    torch.testing.assert_close(batched, rows, rtol=1e-14, atol=1e-15)
