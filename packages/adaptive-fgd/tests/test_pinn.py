"""The PINN baseline: autograd Laplacian vs the analytic one, and a short fit that learns."""

import itertools
import math

import numpy as np
import pytest
import torch

from adaptive_fgd.pinn import laplacian, pinn_fit


def test_laplacian_matches_the_analytic_one():
    # f = sin(pi x) sin(2 pi y) e^x: Laplacian = (1 - 5 pi^2) f + 2 pi cos(pi x) sin(2 pi y) e^x
    gen = torch.Generator().manual_seed(4)
    p = torch.rand(37, 2, generator=gen, dtype=torch.float64)

    def f(q):
        return torch.sin(math.pi * q[:, 0]) * torch.sin(2 * math.pi * q[:, 1]) * torch.exp(q[:, 0])

    x, y = p[:, 0], p[:, 1]
    want = (1 - 5 * math.pi**2) * f(p) + 2 * math.pi * torch.cos(math.pi * x) * torch.sin(
        2 * math.pi * y
    ) * torch.exp(x)
    # float64 rounding over a few dozen operations on O(50)-sized values
    torch.testing.assert_close(laplacian(f, p).detach(), want, rtol=0, atol=1e-11)


def _u(p):
    return np.sin(np.pi * p[:, 0]) * np.sin(np.pi * p[:, 1])


def test_pinn_fit_learns_a_smooth_poisson_solution():
    pts = np.random.default_rng(0).uniform(size=(200, 2))
    rows = pinn_fit(
        lambda p: 2 * np.pi**2 * _u(p), pts, _u(pts), steps=150, lr=1e-2, every=50, n_colloc=128
    )
    assert [r["step"] for r in rows] == [50, 100, 150]
    rms_u = float(np.sqrt(np.mean(_u(pts) ** 2)))  # the error of u = 0
    assert rows[-1]["l2_error"] < 0.2 * rms_u, rows[-1]
    assert rows[-1]["loss"] < rows[0]["loss"]
    assert all(b["seconds"] >= a["seconds"] for a, b in itertools.pairwise(rows))


def test_pinn_fit_bad_input():
    pts = np.zeros((3, 2))
    with pytest.raises(ValueError, match="exactly one"):
        pinn_fit(_u, pts, np.zeros(3), budget=1.0, steps=10)
    with pytest.raises(ValueError, match="exactly one"):
        pinn_fit(_u, pts, np.zeros(3))
    with pytest.raises(ValueError, match="budget"):
        pinn_fit(_u, pts, np.zeros(3), budget=math.inf)
    with pytest.raises(ValueError, match="steps"):
        pinn_fit(_u, pts, np.zeros(3), steps=0)
