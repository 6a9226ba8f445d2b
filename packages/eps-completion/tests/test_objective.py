"""The factored objective: gradient and line-search quartic against independent routes."""

import pytest
import torch

from eps_completion.objective import line_quartic, quadratic_form, value_and_grad
from eps_completion.problem import observe
from eps_completion.sensing import EpsSensing

EPS64 = torch.finfo(torch.float64).eps


def _setup(m, n, k, p, seed, weights):
    g = torch.Generator().manual_seed(seed)
    mat = torch.randn(m, n, generator=g, dtype=torch.float64)
    obs = observe(mat, torch.rand(m, n, generator=g) < p, allow_empty_lines=True)
    op = EpsSensing(obs, 0.3, weights=weights, generator=g)
    L = torch.randn(m, k, generator=g, dtype=torch.float64)
    R = torch.randn(n, k, generator=g, dtype=torch.float64)
    return op, L, R, g


@pytest.mark.parametrize("weights", ["uniform", "random"])
@pytest.mark.parametrize(("m", "n", "k"), [(9, 7, 2), (5, 13, 4), (17, 6, 1)])
def test_gradient_matches_autograd_of_dense_operator(weights, m, n, k):
    op, L, R, _ = _setup(m, n, k, 0.45, m + 7 * n + k, weights)
    f, d_l, d_r = value_and_grad(L, R, op.obs, op.eps, op.xi)
    L_ = L.clone().requires_grad_()
    R_ = R.clone().requires_grad_()
    ref = op.loss(L_ @ R_.T)  # independent route: 0.5 ||A_eps(X) - b||^2 through the operator
    ref.backward()
    scale = float(L.norm() * R.norm())
    assert float(f) == pytest.approx(float(ref.detach()), rel=1e3 * EPS64 * m * n)
    tol = 1e3 * EPS64 * m * n * scale * max(1.0, scale)
    assert torch.allclose(d_l, L_.grad, rtol=0, atol=tol)
    assert torch.allclose(d_r, R_.grad, rtol=0, atol=tol)


def test_gradient_central_differences():
    op, L, R, _g = _setup(8, 6, 3, 0.5, 1, "uniform")
    dl = torch.randn_like(L)
    dr = torch.randn_like(R)
    _, d_l, d_r = value_and_grad(L, R, op.obs, op.eps)
    h = 1e-5
    fp = value_and_grad(L + h * dl, R + h * dr, op.obs, op.eps)[0]
    fm = value_and_grad(L - h * dl, R - h * dr, op.obs, op.eps)[0]
    fd = float(fp - fm) / (2 * h)
    exact = float((d_l * dl).sum() + (d_r * dr).sum())
    # truncation O(h^2 f''') plus rounding O(eps64 |f| / h)
    f0 = float(value_and_grad(L, R, op.obs, op.eps)[0])
    assert abs(fd - exact) <= 1e3 * h**2 * abs(exact) + 1e2 * EPS64 * abs(f0) / h


@pytest.mark.parametrize("weights", ["uniform", "random"])
def test_line_quartic_is_exact_along_the_line(weights):
    op, L, R, _g = _setup(7, 9, 2, 0.4, 3, weights)
    dL = torch.randn_like(L)
    dR = torch.randn_like(R)
    c = line_quartic(L, R, dL, dR, op.obs, op.eps, op.xi)
    f0 = float(op.loss(L @ R.T))
    for t in (-0.7, 0.13, 0.5, 1.9):
        direct = float(op.loss((L + t * dL) @ (R + t * dR).T)) - f0
        poly = sum(ci * t ** (i + 1) for i, ci in enumerate(c))
        assert poly == pytest.approx(direct, rel=1e-10, abs=1e-10 * f0)


def test_quadratic_form_is_the_squared_measurement_norm():
    op, L, R, _ = _setup(10, 8, 3, 0.3, 4, "uniform")
    assert float(quadratic_form(L, R, op.obs, op.eps)) == pytest.approx(
        float(op.apply(L @ R.T).pow(2).sum()), rel=1e-12
    )
