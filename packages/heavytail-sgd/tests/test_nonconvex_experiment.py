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
    e_sgd = nc.run_sgd(ps, a, y, 60, 0.1, noise, 1e-3, torch.Generator().manual_seed(5))
    e_clip = nc.run_sgd(ps, a, y, 60, 0.1, noise, 1e-3, torch.Generator().manual_seed(5), clip=1e12)
    torch.testing.assert_close(e_sgd, e_clip)
    _, start = nc.full_grads(ps, a, y)
    assert bool((e_sgd < 0.9 * start).all())
    free = nc.run_sgd(ps, a, y, 60, 0.1, None, 1.0, torch.Generator())
    assert free.shape == (4,) and bool((free < start).all())


def test_experiment_is_registered():
    eps = entry_points(group="frontier_opt.experiments")
    assert "heavytail-sgd.nonconvex" in {e.name for e in eps}


def test_quick_path_runs_end_to_end_at_a_tiny_size(tmp_path, monkeypatch):
    monkeypatch.setattr(nc, "_sizes", lambda ctx: ([10, 30, 90], 4, 20))
    monkeypatch.setattr(nc, "N_SAMPLES", 16)
    assert nc.main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "result.json").read_text())
    assert [r["method"] for r in res["table"]] == ["sgd", "clipped", "noise-free"]
    sgd = res["table"][0]
    assert (
        res["holds"] == sgd["at_least_as_fast"] == (sgd["median_ci"][1] <= sgd["predicted_slope"])
    )
    assert all(len(r["median_min_grad_norm"]) == 3 for r in res["table"])
    assert all((tmp_path / png).is_file() for png in res["plots"])
