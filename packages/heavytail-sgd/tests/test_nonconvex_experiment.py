"""The nonconvex experiment's measuring parts, and a tiny end-to-end run."""

from __future__ import annotations

import json
import math
from importlib.metadata import entry_points

import pytest
import torch

from heavytail_sgd.experiments import nonconvex as nc
from heavytail_sgd.noise import SymmetricAlphaStable


def test_data_and_init_are_fixed_by_the_seed():
    a, y = nc.make_data(16, 0)
    a2, y2 = nc.make_data(16, 0)
    assert a.shape == (16, nc.IN_DIM) and torch.equal(a, a2) and torch.equal(y, y2)
    ps = nc.init_params(3, 0)
    assert nc.n_params(ps) == nc.HIDDEN * (nc.IN_DIM + 2) + 1
    assert all(torch.equal(p[0], p[2]) for p in ps)
    with pytest.raises(ValueError, match="n must be"):
        nc.make_data(0, 0)
    with pytest.raises(ValueError, match="runs must be"):
        nc.init_params(0, 0)


def test_batched_gradients_match_single_run_autograd():
    a, y = nc.make_data(12, 1)
    ps = nc.init_params(2, 1)
    with torch.no_grad():
        ps[0][1] += 0.3  # make the two runs differ
    grads, nrm = nc.full_grads(ps, a, y)
    for r in range(2):
        one = [p[r : r + 1].clone().requires_grad_(True) for p in ps]
        ref = torch.autograd.grad(nc.losses(one, a, y).sum(), one)
        for g, g_ref in zip(grads, ref, strict=True):
            torch.testing.assert_close(g[r : r + 1], g_ref)
        assert float(nrm[r]) == pytest.approx(math.sqrt(sum(float((g**2).sum()) for g in ref)))


def test_power_iteration_finds_the_largest_hessian_eigenvalue():
    a, y = nc.make_data(20, 2)
    ps = nc.init_params(1, 2)
    shapes = [p.shape for p in ps]
    sizes = [p.numel() for p in ps]

    def f(flat):
        parts = [t.reshape(s) for t, s in zip(flat.split(sizes), shapes, strict=True)]
        return nc.losses(parts, a, y).sum()

    h = torch.autograd.functional.hessian(f, torch.cat([p.reshape(-1) for p in ps]), vectorize=True)
    eig = torch.linalg.eigvalsh(h)
    top = float(eig[eig.abs().argmax()])
    assert nc.top_hessian_eig(ps, a, y, iters=100) == pytest.approx(top, rel=1e-6)


def test_clipped_path_with_an_inactive_level_equals_sgd_and_sgd_descends():
    a, y = nc.make_data(32, 3)
    ps = nc.init_params(4, 3)
    noise = SymmetricAlphaStable(1.6)
    m_sgd, s_sgd = nc.run_sgd(ps, a, y, 60, 0.1, noise, 1e-3, torch.Generator().manual_seed(5))
    m_clip, s_clip = nc.run_sgd(
        ps, a, y, 60, 0.1, noise, 1e-3, torch.Generator().manual_seed(5), clip=1e12
    )
    torch.testing.assert_close(m_sgd, m_clip)
    torch.testing.assert_close(s_sgd, s_clip)
    _, start = nc.full_grads(ps, a, y)
    assert bool((m_sgd < 0.9 * start).all())
    assert bool((m_sgd**2 <= s_sgd).all())  # the minimum is below the mean
    free, _ = nc.run_sgd(ps, a, y, 60, 0.1, None, 1.0, torch.Generator())
    assert free.shape == (4,) and bool((free < start).all())


def test_max_grad_norm_along_gd_is_a_max_over_a_brute_force_loop():
    a, y = nc.make_data(24, 4)
    ps = nc.init_params(1, 4)
    ref, cur = 0.0, [p.clone() for p in ps]
    for _ in range(16):
        grads, nrm = nc.full_grads(cur, a, y)
        ref = max(ref, float(nrm[0]))
        cur = [p - 0.2 * g for p, g in zip(cur, grads, strict=True)]
    assert nc.max_grad_norm_along_gd(ps, a, y, 0.2, 15) == pytest.approx(ref)


def test_cosine_gradient_matches_autograd_and_constants():
    x = 3 * torch.randn(6, 9, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    xr = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(nc.cosine_loss(xr).sum(), xr)
    torch.testing.assert_close(nc.cosine_grad(x), auto)
    x1 = nc.cosine_start(11, 2)
    assert x1.shape == (11,) and bool(((x1.abs() >= 1) & (x1.abs() <= 2.5)).all())
    assert torch.equal(x1, nc.cosine_start(11, 2))
    with pytest.raises(ValueError, match="d must be"):
        nc.cosine_start(0, 0)


def test_run_cosine_equals_a_plain_sgd_loop_with_the_same_noise():
    x1 = nc.cosine_start(7, 1)
    noise = SymmetricAlphaStable(1.5)
    avg, mins = nc.run_cosine(x1, 50, 0.07, noise, 0.2, 3, torch.Generator().manual_seed(9))
    g = torch.Generator().manual_seed(9)
    x = x1.expand(3, -1).clone()
    sq = []
    for _ in range(50):
        grad = torch.sin(x)
        sq.append((grad * grad).sum(-1))
        x = x - 0.07 * (grad + 0.2 * noise.sample(grad.shape, generator=g, dtype=grad.dtype))
    sq = torch.stack(sq)
    torch.testing.assert_close(avg, sq.mean(0))
    torch.testing.assert_close(mins, sq.min(0).values.sqrt())


def test_noise_free_cosine_dissipates_the_initial_gap():
    # Gradient flow on the cosine problem turns all of F(x1) into sum_t eta ||grad||^2 as
    # eta -> 0 with eta T fixed and large: the identity behind the bound's 2 Delta/(eta T).
    x1 = nc.cosine_start(5, 3)
    delta = float(nc.cosine_loss(x1))
    for eta, T in ((0.01, 3000), (0.002, 15000)):
        avg, _ = nc.run_cosine(x1, T, eta, None, 1.0, 1, torch.Generator())
        assert float(avg[0]) * eta * T == pytest.approx(delta, rel=eta)


def test_design_sigma_puts_the_cap_at_t_cap():
    from heavytail_sgd.schedules import nonconvex_sgd_horizon

    p, delta, L, G = 1.4, 2.5, 3.0, 4.0
    sigma = nc.design_sigma(p, delta, L, G, 40)
    assert nonconvex_sgd_horizon(40, p, sigma, delta, L, G)(1) == pytest.approx(1 / (2 * L))
    assert nonconvex_sgd_horizon(41, p, sigma, delta, L, G)(1) < 1 / (2 * L)
    assert nc.noise_for(2.0).alpha == 2.0 and nc.noise_for(1.3).finite_moment(1.3)


def test_experiment_is_registered():
    eps = entry_points(group="frontier_opt.experiments.extra")  # quick run over 90 s
    assert "heavytail-sgd.nonconvex" in {e.name for e in eps}


def test_quick_path_runs_end_to_end_at_a_tiny_size(tmp_path, monkeypatch):
    sizes = {"cosine": ([20, 60, 180], 6), "mlp": ([10, 30, 90], 4), "reps": ([], 20)}
    monkeypatch.setattr(nc, "_sizes", lambda ctx: sizes)
    monkeypatch.setattr(nc, "N_SAMPLES", 16)
    assert nc.main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "result.json").read_text())
    cos = [r for r in res["table"] if r["problem"] == "cosine"]
    mlp = [r for r in res["table"] if r["problem"] == "mlp"]
    assert [r["p"] for r in cos] == list(nc.P_VALUES)
    assert [r["method"] for r in mlp] == ["sgd", "clipped", "noise-free"]
    tol = nc.SLOPE_TOL
    for r in cos:
        lo, hi = r["rms_ci_simultaneous"]
        assert r["slope_within_tol"] == (
            r["predicted_slope"] - tol <= lo and hi <= r["predicted_slope"] + tol
        )
        assert r["below_bound"] == all(
            v <= b for v, b in zip(r["rms_grad"], r["bound"], strict=True)
        )
    cos_ok = all(r["slope_within_tol"] and r["below_bound"] for r in cos)
    assert res["holds"] == (cos_ok and mlp[0]["at_least_as_fast"])
    assert all((tmp_path / png).is_file() for png in res["plots"])
