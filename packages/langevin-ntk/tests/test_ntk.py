"""Empirical NTK tooling against explicit Jacobians, finite differences and eigvalsh."""

import warnings

import pytest
import torch

from langevin_ntk import MLP, NTKMonitor, empirical_ntk, jacobian, ntk_matvec, ntk_min_eigenvalue
from langevin_ntk.ntk import (
    jacobian_loop,
    lanczos_extreme,
    mlp_ntk,
    relative_change,
    two_layer_jacobian,
    two_layer_ntk,
    weight_distance,
)

F64 = torch.float64


def _net(d_in=5, width=13, depth=3, act="tanh", par="standard", d_out=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    return MLP(d_in, width, depth, act, par, d_out, generator=g, dtype=F64)


@pytest.mark.parametrize(
    ("depth", "d_out", "par"), [(2, 1, "standard"), (3, 2, "ntk"), (4, 3, "standard")]
)
def test_jacobian_matches_per_sample_autograd(depth, d_out, par):
    net = _net(depth=depth, d_out=d_out, par=par)
    x = torch.randn(7, 5, dtype=F64, generator=torch.Generator().manual_seed(1))
    j = jacobian(net, x)
    assert j.shape == (7 * d_out, sum(p.numel() for p in net.parameters()))
    assert torch.allclose(j, jacobian_loop(net, x), rtol=0, atol=1e-12)


def test_jacobian_matches_central_finite_differences():
    net = _net(width=6, depth=3, act="gelu")
    x = torch.randn(4, 5, dtype=F64, generator=torch.Generator().manual_seed(2))
    j = jacobian(net, x)
    flat = torch.nn.utils.parameters_to_vector(net.parameters()).detach()
    h = 1e-6
    cols = []
    for k in range(flat.numel()):
        out = []
        for sign in (1, -1):
            v = flat.clone()
            v[k] += sign * h
            torch.nn.utils.vector_to_parameters(v, net.parameters())
            with torch.no_grad():
                out.append(net(x))
        cols.append((out[0] - out[1]) / (2 * h))
    torch.nn.utils.vector_to_parameters(flat, net.parameters())
    fd = torch.stack(cols, 1)
    # central differences: error O(h^2 f''') + O(eps |f| / h) ~ 1e-10 here
    assert torch.allclose(j, fd, rtol=0, atol=1e-8)


def test_empirical_ntk_is_j_jt_and_cross_kernel():
    net = _net(d_out=2)
    x = torch.randn(6, 5, dtype=F64)
    x2 = torch.randn(3, 5, dtype=F64)
    j, j2 = jacobian_loop(net, x), jacobian_loop(net, x2)
    assert torch.allclose(empirical_ntk(net, x), j @ j.T, rtol=0, atol=1e-10)
    assert torch.allclose(empirical_ntk(net, x, x2), j @ j2.T, rtol=0, atol=1e-10)


def test_implicit_product_matches_explicit():
    net = _net(d_out=2)
    x = torch.randn(9, 5, dtype=F64)
    mv, size = ntk_matvec(net, x)
    j = jacobian(net, x)
    v = torch.randn(size, dtype=F64)
    assert size == 18
    assert torch.allclose(mv(v), j @ (j.T @ v), rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="shape"):
        mv(torch.randn(3, dtype=F64))


@pytest.mark.parametrize("n", [1, 2, 37, 61])
def test_lanczos_matches_eigvalsh(n):
    g = torch.Generator().manual_seed(n)
    b = torch.randn(n, n + 3, generator=g, dtype=F64)
    a = b @ b.T / n + 1e-3 * torch.eye(n, dtype=F64)
    lo, hi, _ = lanczos_extreme(lambda v: a @ v, n, tol=1e-12)
    ev = torch.linalg.eigvalsh(a)
    # full reorthogonalisation: exact to rounding (eps * ||A|| * n) once converged
    tol = 1e-10 * float(ev[-1]) * n
    assert abs(lo - float(ev[0])) <= tol and abs(hi - float(ev[-1])) <= tol


def test_ntk_min_eigenvalue_routes_agree_and_fallback_warns():
    net = _net(width=40)
    x = torch.randn(23, 5, dtype=F64, generator=torch.Generator().manual_seed(4))
    exact = ntk_min_eigenvalue(net, x, method="exact")
    ref = float(torch.linalg.eigvalsh(jacobian_loop(net, x) @ jacobian_loop(net, x).T)[0])
    assert exact == pytest.approx(ref, rel=1e-10)
    lz = ntk_min_eigenvalue(net, x, method="lanczos", tol=1e-12)
    assert lz == pytest.approx(ref, rel=1e-6)
    with pytest.warns(UserWarning, match="falling back to Lanczos"):
        fb = ntk_min_eigenvalue(net, x, method="exact", max_exact=10)
    assert fb == pytest.approx(ref, rel=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ntk_min_eigenvalue(net, x)  # auto, below max_exact: silent
    with pytest.raises(ValueError, match="method"):
        ntk_min_eigenvalue(net, x, method="svd")


def test_relative_change_and_weight_distance():
    a, b = torch.randn(4, 3, dtype=F64), torch.randn(4, 3, dtype=F64)
    assert relative_change(a, b) == pytest.approx(float((a - b).norm() / b.norm()))
    assert relative_change(b, b) == 0.0
    with pytest.raises(ValueError, match="zero norm"):
        relative_change(a, torch.zeros(4, 3))
    with pytest.raises(ValueError, match="shapes"):
        relative_change(a, b.T)
    d, r = weight_distance({"u": a, "v": b}, {"u": b, "v": b})
    assert d == pytest.approx(float((a - b).norm()))
    assert r == pytest.approx(d / float((2 * b.pow(2).sum()).sqrt()))
    with pytest.raises(ValueError, match="different"):
        weight_distance({"u": a}, {"w": a})


def test_monitor_records_changes_every_k_steps():
    net = _net(width=20)
    x = torch.randn(6, 5, dtype=F64)
    mon = NTKMonitor(net, x, every=3)
    rec0 = mon(0)
    assert rec0["jacobian_change"] == 0.0 and rec0["lambda_min_ratio"] == pytest.approx(1.0)
    assert mon(1) is None and mon(2) is None
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(1.1)
    rec = mon(3)
    assert rec["weight_distance_rel"] == pytest.approx(0.1, rel=1e-12)
    assert rec["jacobian_change"] > 0 and rec["ntk_change"] > 0
    assert len(mon.history) == 2
    with pytest.raises(ValueError, match="every"):
        NTKMonitor(net, x, every=0)


def test_bad_batches():
    net = _net()
    with pytest.raises(ValueError, match="batch"):
        jacobian(net, torch.zeros(0, 5, dtype=F64))
    with pytest.raises(ValueError, match="shape"):
        net(torch.zeros(3, 4, dtype=F64))
    with pytest.raises(ValueError, match="no trainable"):
        jacobian(torch.nn.Tanh(), torch.zeros(3, 2))


@pytest.mark.parametrize("act", ["tanh", "softplus", "erf"])
def test_two_layer_closed_forms_match_autodiff(act):
    # two independent routes: torch.func on the module vs the hand-derived formulas
    nets = [_net(d_in=7, width=11, depth=2, act=act, seed=s) for s in range(3)]
    x = torch.randn(5, 7, dtype=F64, generator=torch.Generator().manual_seed(6))
    w = torch.stack([n.weights[0].detach() for n in nets])
    a = torch.stack([n.weights[1].detach()[0] for n in nets])
    jb = two_layer_jacobian(w, a, x, act)
    kb = two_layer_ntk(w, a, x, act)
    for i, net in enumerate(nets):
        assert torch.allclose(jb[i], jacobian(net, x), rtol=0, atol=1e-12)
        assert torch.allclose(kb[i], empirical_ntk(net, x), rtol=0, atol=1e-11)
    with pytest.raises(ValueError, match="need w"):
        two_layer_ntk(w, a[:, :3], x)


@pytest.mark.parametrize(
    ("depth", "par", "act"), [(2, "standard", "tanh"), (3, "ntk", "gelu"), (5, "standard", "erf")]
)
def test_structured_mlp_ntk_matches_j_jt(depth, par, act):
    net = _net(d_in=6, width=9, depth=depth, act=act, par=par, seed=depth)
    x = torch.randn(8, 6, dtype=F64, generator=torch.Generator().manual_seed(9))
    j = jacobian_loop(net, x)
    assert torch.allclose(mlp_ntk(net, x), j @ j.T, rtol=0, atol=1e-11)
    with pytest.raises(ValueError, match="d_out == 1"):
        mlp_ntk(_net(d_out=2), x[:, :5])


def test_lanczos_low_rank_operator_and_bad_arguments():
    # rank 3 in R^40: the Krylov space becomes invariant after 4 steps (lambda_min = 0 exactly)
    g = torch.Generator().manual_seed(8)
    b = torch.randn(40, 3, generator=g, dtype=F64)
    a = b @ b.T
    lo, hi, its = lanczos_extreme(lambda v: a @ v, 40, tol=1e-12)
    ev = torch.linalg.eigvalsh(a)
    assert abs(lo) <= 1e-10 * float(ev[-1]) and hi == pytest.approx(float(ev[-1]), rel=1e-12)
    assert its <= 8
    with pytest.raises(ValueError, match="check_every"):
        lanczos_extreme(lambda v: a @ v, 40, check_every=0)
    with pytest.raises(ValueError, match="n must"):
        lanczos_extreme(lambda v: v, 0)
