"""The radius bound: its Jacobian-change bound against the exact Jacobian (random and
adversarial perturbations, small and large radii), lambda_min inside the radius, the
activation constants, the Gaussian init-norm bounds by Monte-Carlo, and its scaling."""

import math

import numpy as np
import pytest
import torch

from langevin_ntk import MLP
from langevin_ntk.models import get_activation
from langevin_ntk.ntk import jacobian, mlp_ntk
from langevin_ntk.stability_radius import (
    ACTIVATION_CONSTANTS,
    InitNorms,
    deep_stability_radius,
    gaussian_init_norms,
    jacobian_change_bound,
    network_init_norms,
    stability_radius,
)

F64 = torch.float64


def _setup(depth, seed, width=23, d=7, n=5, act="tanh"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, dtype=F64, generator=g) * 1.3
    net = MLP(d, width, depth, act, generator=g, dtype=F64)
    return net, x


def _set(net, base, dirs, r):
    norm = math.sqrt(sum(float(v.pow(2).sum()) for v in dirs))
    with torch.no_grad():
        for w, w0, v in zip(net.weights, base, dirs, strict=True):
            w.copy_(w0 + r * v / norm)


@pytest.mark.parametrize("act", ["tanh", "erf", "sigmoid"])
def test_activation_constants_are_the_grid_maxima(act):
    a = get_activation(act)
    z = torch.linspace(-8, 8, 200_001, dtype=F64, requires_grad=True)
    d1 = a.deriv(z)
    (d2,) = torch.autograd.grad(d1.sum(), z)
    l1, l2 = ACTIVATION_CONSTANTS[act]
    assert float(d1.detach().abs().max()) == pytest.approx(l1, rel=1e-8)
    assert float(d2.abs().max()) == pytest.approx(l2, rel=1e-8)


@pytest.mark.parametrize(("depth", "act"), [(2, "tanh"), (3, "tanh"), (4, "tanh"), (3, "erf")])
def test_jacobian_change_bound_holds_for_random_perturbations(depth, act):
    """||J(theta) - J_0||_F <= bound(R) on the sphere of radius R, from tiny R (first-order
    terms) to R = 5 (where the R^2 terms and the saturation caps dominate)."""
    net, x = _setup(depth, 10 + depth, act=act)
    nb = network_init_norms(net, x)
    j0 = jacobian(net, x)
    base = [w.detach().clone() for w in net.weights]
    g = torch.Generator().manual_seed(0)
    for r in (1e-3, 0.05, 0.5, 5.0):
        bound = jacobian_change_bound(nb, r, act)
        for _ in range(8):
            _set(net, base, [torch.randn(w.shape, generator=g, dtype=F64) for w in base], r)
            assert float((jacobian(net, x) - j0).norm()) <= bound
    _set(net, base, [torch.zeros_like(w) for w in base], 1.0)


def _jacobian_graph(net, x):
    """Per-sample gradients kept differentiable (create_graph), stacked as J."""
    rows = []
    for i in range(x.shape[0]):
        gs = torch.autograd.grad(net(x[i : i + 1]).sum(), list(net.weights), create_graph=True)
        rows.append(torch.cat([v.reshape(-1) for v in gs]))
    return torch.stack(rows)


@pytest.mark.parametrize("depth", [3, 4])
def test_bound_survives_an_adversarial_search(depth):
    """Projected gradient ascent on ||J - J_0||_F inside the ball of radius R, then on
    -lambda_min(K) inside the stability radius: neither crosses its bound."""
    net, x = _setup(depth, 20 + depth, width=17)
    nb = network_init_norms(net, x)
    j0 = jacobian(net, x).detach()
    base = [w.detach().clone() for w in net.weights]
    lam0 = float(torch.linalg.eigvalsh(mlp_ntk(net, x))[0])
    radius = stability_radius(nb, lam0)
    assert radius > 0
    for r, objective in ((0.3, "jac"), (radius, "lam")):
        g = torch.Generator().manual_seed(1)
        _set(net, base, [torch.randn(w.shape, generator=g, dtype=F64) for w in base], r)
        for _ in range(25):
            jac = _jacobian_graph(net, x)
            if objective == "jac":
                val = (jac - j0).pow(2).sum()
            else:
                val = -torch.linalg.eigvalsh(jac @ jac.T)[0]
            grads = torch.autograd.grad(val, list(net.weights))
            with torch.no_grad():  # ascent step, then back onto the sphere of radius r
                step = [
                    v / (float(sum(u.pow(2).sum() for u in grads)) ** 0.5 + 1e-300) for v in grads
                ]
                dirs = [
                    w - w0 + 0.2 * r * s for w, w0, s in zip(net.weights, base, step, strict=True)
                ]
            _set(net, base, dirs, r)
        with torch.no_grad():
            jac = jacobian(net, x)
        if objective == "jac":
            assert float((jac - j0).norm()) <= jacobian_change_bound(nb, r)
        else:
            assert float(torch.linalg.eigvalsh(jac @ jac.T)[0]) >= lam0 / 2


def test_radius_solves_the_margin_equation():
    net, x = _setup(3, 3)
    nb = network_init_norms(net, x)
    lam0 = float(torch.linalg.eigvalsh(mlp_ntk(net, x))[0])
    r = stability_radius(nb, lam0)
    target = (1 - 1 / math.sqrt(2)) * math.sqrt(lam0)
    assert jacobian_change_bound(nb, r) == pytest.approx(target, rel=1e-9)
    assert stability_radius(nb, 4 * lam0) > r  # a larger lambda_0 buys a larger ball
    assert stability_radius(nb, 0.0) == 0.0


def test_gaussian_init_norms_hold_by_monte_carlo():
    """The w.h.p. bounds on the init norms: each exceeded in at most p of 200 draws (+3 SE)."""
    x = torch.randn(4, 9, dtype=F64, generator=torch.Generator().manual_seed(0))
    p, draws, m, depth = 0.3, 200, 40, 3
    b = gaussian_init_norms(x, m, depth, p)
    fails = 0
    for s in range(draws):
        nb = network_init_norms(
            MLP(9, m, depth, generator=torch.Generator().manual_seed(s), dtype=F64), x
        )
        over = any(a > c for a, c in zip(nb.op, b.op, strict=True))
        over = over or any(a > c for a, c in zip(nb.max_col, b.max_col, strict=True))
        fails += over
    assert fails / draws <= p + 3 * math.sqrt(p * (1 - p) / draws)
    assert b.x_norms == nb.x_norms


def test_radius_shrinks_with_width_like_a_lazy_ball():
    """The derivation predicts R ~ m^(-1/4) at large width (the R^2 term), so R/||theta_0||
    ~ m^(-3/4): the radius certifies a neighbourhood that vanishes relative to the weights."""
    x = torch.randn(4, 9, dtype=F64, generator=torch.Generator().manual_seed(0))
    widths = [10**6, 10**7, 10**8]
    rs = [deep_stability_radius(x, m, 3, 0.1) for m in widths]
    assert all(r["radius"] > 0 for r in rs)
    rel = [r["radius"] / r["init_norm"] for r in rs]
    slope = np.polyfit(np.log(widths), np.log(rel), 1)[0]
    assert -0.9 < slope < -0.6, slope


def test_bad_input():
    net, x = _setup(3, 0)
    nb = network_init_norms(net, x)
    with pytest.raises(ValueError, match="radius"):
        jacobian_change_bound(nb, -1.0)
    with pytest.raises(ValueError, match="lambda0"):
        stability_radius(nb, float("nan"))
    with pytest.raises(ValueError, match="activation"):
        jacobian_change_bound(nb, 0.1, "relu")
    with pytest.raises(ValueError, match="standard"):
        network_init_norms(MLP(7, 5, 3, parameterization="ntk"), x.float())
    with pytest.raises(ValueError, match="failure_prob"):
        gaussian_init_norms(x, 10, 3, 0.0)
    assert isinstance(nb, InitNorms) and nb.depth == 3
    assert deep_stability_radius(x, 10, 3, 0.1)["radius"] == 0.0  # kappa = 0: nothing certified
