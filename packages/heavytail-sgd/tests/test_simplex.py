"""The sort-based simplex projection against an optimality certificate, bisection and scipy."""

import pytest
import torch
from scipy.optimize import minimize

from heavytail_sgd.optim import SMD
from heavytail_sgd.simplex import Simplex, project_simplex
from shared_core.mirror import Euclidean


def _bisection(y: torch.Tensor, iters: int = 200) -> torch.Tensor:
    """Reference: find tau with sum(max(y - tau, 0)) = 1 by bisection (monotone in tau)."""
    lo, hi = float(y.min()) - 1.0, float(y.max())
    for _ in range(iters):
        mid = (lo + hi) / 2
        if float((y - mid).clamp(min=0).sum()) > 1:
            lo = mid
        else:
            hi = mid
    return (y - (lo + hi) / 2).clamp(min=0)


@pytest.mark.parametrize("d", [1, 2, 5, 50])
def test_projection_is_certified_optimal_and_matches_bisection(d):
    g = torch.Generator().manual_seed(d)
    y = 3 * torch.randn(20, d, generator=g, dtype=torch.float64)
    z = project_simplex(y)
    assert bool((z >= 0).all())
    torch.testing.assert_close(z.sum(-1), torch.ones(20, dtype=torch.float64))
    # z is the projection iff <y - z, w - z> <= 0 for every w in the simplex; the simplex is
    # the hull of the vertices e_j, so checking the vertices certifies it.
    gap = (y - z)[:, None, :] @ (torch.eye(d, dtype=torch.float64) - z[:, None, :]).transpose(1, 2)
    assert float(gap.max()) <= 1e-12
    ref = torch.stack([_bisection(row) for row in y])
    torch.testing.assert_close(z, ref, atol=1e-12, rtol=0)


def test_projection_matches_scipy_slsqp():
    g = torch.Generator().manual_seed(7)
    y = torch.randn(6, generator=g, dtype=torch.float64)
    yn = y.numpy()
    res = minimize(
        lambda z: 0.5 * ((z - yn) ** 2).sum(),
        x0=[1 / 6] * 6,
        jac=lambda z: z - yn,
        bounds=[(0, None)] * 6,
        constraints=[{"type": "eq", "fun": lambda z: z.sum() - 1}],
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 500},
    )
    torch.testing.assert_close(project_simplex(y), torch.from_numpy(res.x), atol=1e-7, rtol=0)


def test_points_of_the_simplex_are_fixed_and_batches_are_independent():
    g = torch.Generator().manual_seed(1)
    x = torch.softmax(torch.randn(4, 9, generator=g, dtype=torch.float64), -1)
    torch.testing.assert_close(project_simplex(x), x)
    y = torch.randn(3, 4, 9, generator=g, dtype=torch.float64)
    torch.testing.assert_close(project_simplex(y)[1, 2], project_simplex(y[1, 2]))


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="finite"):
        project_simplex(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="floating"):
        project_simplex(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="outside the domain"):
        SMD([torch.nn.Parameter(torch.tensor([0.7, 0.7]))], lr=0.1, mirror=Euclidean(Simplex()))


def test_projected_sgd_through_smd_stays_on_the_simplex_and_solves_a_linear_program():
    x = torch.nn.Parameter(torch.full((5,), 0.2, dtype=torch.float64))
    opt = SMD([x], lr=0.1, mirror=Euclidean(Simplex()))
    c = torch.tensor([3.0, 1.0, 2.0, 0.5, 4.0], dtype=torch.float64)
    for _ in range(100):
        x.grad = c.clone()
        opt.step()
        assert bool(Simplex().contains(x.detach()))
    torch.testing.assert_close(x.detach(), torch.eye(5, dtype=torch.float64)[3])
