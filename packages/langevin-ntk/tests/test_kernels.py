"""Infinite-width kernels: closed form vs quadrature vs Monte-Carlo, and the width limit."""

import math

import numpy as np
import pytest
import torch

from langevin_ntk import MLP, empirical_ntk
from langevin_ntk.kernels import analytic_ntk, erf_dot_kernel, erf_kernel, gaussian_expectation

F64 = torch.float64


def _cov(n, seed):
    g = torch.Generator().manual_seed(seed)
    b = torch.randn(n, n + 2, generator=g, dtype=F64)
    return b @ b.T / (n + 2)


def test_erf_closed_form_matches_quadrature():
    c = _cov(6, 0)
    q = gaussian_expectation(torch.erf, torch.erf, c, order=64)
    assert torch.allclose(erf_kernel(c), q, atol=1e-9)
    d = lambda z: 2 / math.sqrt(math.pi) * torch.exp(-z * z)  # noqa: E731
    assert torch.allclose(erf_dot_kernel(c), gaussian_expectation(d, d, c, order=64), atol=1e-9)


def test_quadrature_matches_monte_carlo_for_tanh():
    c = _cov(4, 1)
    q = gaussian_expectation(torch.tanh, torch.tanh, c)
    n = 400_000
    u = torch.distributions.MultivariateNormal(torch.zeros(4, dtype=F64), c).sample((n,))
    mc = (torch.tanh(u).T @ torch.tanh(u)) / n
    se = (torch.tanh(u) ** 2).T @ (torch.tanh(u) ** 2) / n  # E[x^2 y^2] >= var(xy)
    assert ((mc - q).abs() <= 5 * (se / n).sqrt()).all()


def test_quadrature_is_exact_on_polynomials():
    c = _cov(3, 2)
    # Isserlis: E[u^2 v^2] = a b + 2 c^2
    e = gaussian_expectation(lambda z: z**2, lambda z: z**2, c, order=8)
    a = torch.diagonal(c)
    assert torch.allclose(e, a[:, None] * a[None, :] + 2 * c**2, atol=1e-12)


def test_analytic_ntk_one_hidden_layer_formula():
    x = torch.randn(5, 3, dtype=F64, generator=torch.Generator().manual_seed(3))
    cov = x @ x.T / 3
    th = analytic_ntk(x, "erf")
    assert torch.allclose(th, erf_kernel(cov) + erf_dot_kernel(cov) * cov, atol=1e-14)
    # erf of a wide Gaussian is nearly a step: the rule needs many nodes (error 1e-10 at 128)
    th_q = analytic_ntk(x, "erf", depth=4, closed_form=False, order=128)
    assert torch.allclose(analytic_ntk(x, "erf", depth=4), th_q, atol=1e-8)


@pytest.mark.parametrize(("act", "depth"), [("erf", 2), ("tanh", 2), ("softplus", 3)])
def test_empirical_ntk_approaches_the_infinite_width_kernel(act, depth):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 4, generator=g, dtype=F64)
    th = analytic_ntk(x, act, depth=depth)
    widths = [64, 256, 1024, 4096] if depth == 2 else [32, 128, 512]
    errs = []
    for m in widths:
        e = [
            float(
                (empirical_ntk(MLP(4, m, depth, act, "ntk", generator=g, dtype=F64), x) - th).norm()
            )
            for _ in range(6)
        ]
        errs.append(np.mean(e))
    slope = np.polyfit(np.log(widths), np.log(errs), 1)[0]
    # K_m is an average over m neurons: fluctuations ~ m^{-1/2}; 6 seeds x 4 widths leaves
    # ~0.1 of slope noise
    assert -0.8 < slope < -0.3, (slope, errs)
    assert errs[-1] / float(th.norm()) < (0.05 if depth == 2 else 0.15)


def test_bad_input():
    with pytest.raises(ValueError, match="depth"):
        analytic_ntk(torch.randn(3, 2), depth=1)
    with pytest.raises(ValueError, match="unknown activation"):
        analytic_ntk(torch.randn(3, 2), "swish")
    with pytest.raises(ValueError, match="square"):
        gaussian_expectation(torch.tanh, torch.tanh, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="order"):
        gaussian_expectation(torch.tanh, torch.tanh, torch.eye(2), order=1)
