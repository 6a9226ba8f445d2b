"""The experiments' training core against an independent route, and a tiny end-to-end run."""

import json
import math

import pytest
import torch

from langevin_ntk import MLP
from langevin_ntk.experiments import _common, ntk_stability
from langevin_ntk.experiments._common import (
    TwoLayerEnsemble,
    make_data,
    per_seed_loss,
    train_ensemble,
)
from langevin_ntk.ntk import two_layer_ntk


def test_ensemble_gradient_descent_equals_separate_sgd_runs():
    # T = 0: the stacked ensemble must follow each seed's own plain GD trajectory exactly
    x, y = make_data(5, 6, seed=1)
    seeds = [3, 4]
    res = train_ensemble(x, y, 16, 0.0, seeds, t_max=0.05, records=4)
    for i, s in enumerate(seeds):
        g = torch.Generator().manual_seed(10_000 + s)
        w = torch.randn(16, 6, generator=g, dtype=torch.float64) / math.sqrt(6)
        a = torch.randn(16, generator=g, dtype=torch.float64) / math.sqrt(16)
        net = MLP(6, 16, 2, "tanh", dtype=torch.float64)
        with torch.no_grad():
            net.weights[0].copy_(w)
            net.weights[1].copy_(a[None])
        opt = torch.optim.SGD(net.parameters(), lr=res.lr)
        for _ in range(res.steps):
            opt.zero_grad()
            (0.5 * (net(x) - y).pow(2).sum()).backward()
            opt.step()
        with torch.no_grad():
            final = float(0.5 * (net(x) - y).pow(2).sum())
        assert res.loss[i, -1].item() == pytest.approx(final, rel=1e-10)


def test_deep_ensemble_gradient_descent_equals_separate_runs():
    """T = 0: the stacked depth-3 ensemble follows each seed's own GD trajectory."""
    from langevin_ntk.experiments._deep import train_deep
    from langevin_ntk.ntk import mlp_ntk

    x, y = make_data(5, 6, seed=2)
    seeds = [5, 9]
    res = train_deep(x, y, 12, 3, 0.0, seeds, t_max=0.05, records=4)
    lr = res.time[-1] / res.steps
    for i, s in enumerate(seeds):
        net = MLP(6, 12, 3, "tanh", generator=torch.Generator().manual_seed(s), dtype=torch.float64)
        opt = torch.optim.SGD(net.parameters(), lr=lr)
        for _ in range(res.steps):
            opt.zero_grad()
            (0.5 * (net(x) - y).pow(2).sum()).backward()
            opt.step()
        lam = float(torch.linalg.eigvalsh(mlp_ntk(net, x))[0])
        assert res.lambda_min[i, -1].item() == pytest.approx(lam, rel=1e-9)


def test_ensemble_forward_and_ntk_shapes():
    x, y = make_data(4, 3, seed=0)
    ens = TwoLayerEnsemble(3, 7, [0, 1, 2])
    assert ens(x).shape == (3, 4) and per_seed_loss(ens, x, y).shape == (3,)
    k = two_layer_ntk(ens.w.detach(), ens.a.detach(), x)
    assert k.shape == (3, 4, 4)


def test_ntk_stability_runs_end_to_end_on_tiny_sizes(tmp_path, monkeypatch):
    monkeypatch.setattr(ntk_stability, "_sizes", lambda ctx: ([8, 32], [0.0, 0.1], 2))
    monkeypatch.setattr(ntk_stability, "T_MAX", 0.2)
    monkeypatch.setattr(ntk_stability, "DEEP_T_MAX", 0.02)
    monkeypatch.setattr(ntk_stability, "_deep_sizes", lambda ctx: ([64], 2, [16], [0.0, 0.1], 2))
    assert ntk_stability.main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "result.json").read_text())
    assert res["paper"] == "P15" and isinstance(res["holds"], bool)
    assert len(res["table"]) == 4 + 1 + 2
    deep = [r for r in res["table"] if r.get("depth") == 3]
    assert deep[0]["kappa_unconditional"] == 0.0  # width 64 is far too narrow: vacuous
    assert res["metrics"]["R5_deep_init_bound"] is False  # and R5 says so
    assert all(r["inside_min_ratio"] >= 0.5 for r in deep[1:])
    assert all((tmp_path / p).is_file() for p in res["plots"])
    assert _common.make_data(3, 2, 0)[0].shape == (3, 2)


def test_loss_floor_and_lazy_vs_langevin_run_end_to_end_on_tiny_sizes(tmp_path, monkeypatch):
    from langevin_ntk.experiments import lazy_vs_langevin, loss_floor

    monkeypatch.setattr(loss_floor, "_sizes", lambda ctx: ([8], [0.5], 2, 50))
    monkeypatch.setattr(loss_floor, "T_MAX", 0.2)
    assert loss_floor.main(["--quick", "--out", str(tmp_path / "lf")]) == 0
    res = json.loads((tmp_path / "lf" / "result.json").read_text())
    assert res["paper"] == "P15" and len(res["table"]) == 1
    row = res["table"][0]
    assert row["gibbs_floor"] <= row["free_energy_bound"]

    monkeypatch.setattr(lazy_vs_langevin, "_sizes", lambda ctx: ([8, 16, 32], 2))
    monkeypatch.setattr(lazy_vs_langevin, "T_MAX", 0.2)
    assert lazy_vs_langevin.main(["--quick", "--out", str(tmp_path / "lv")]) == 0
    res = json.loads((tmp_path / "lv" / "result.json").read_text())
    assert set(res["metrics"]) >= {"slope_GD", "slope_Langevin", "L1", "L2", "L3"}
    assert all((tmp_path / "lv" / p).is_file() for p in res["plots"])
