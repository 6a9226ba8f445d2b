"""The simplex experiment's measuring parts, and a tiny end-to-end run."""

from __future__ import annotations

import json
import math
from importlib.metadata import entry_points

import pytest
import torch

from heavytail_sgd.experiments import simplex as sx
from heavytail_sgd.noise import SymmetricAlphaStable


def test_radial_noise_has_l2_norm_sqrt_d_times_its_linf_norm():
    g = torch.Generator().manual_seed(0)
    xi = sx.radial_noise(50, 30, SymmetricAlphaStable(1.6), 0.5, g)
    linf = xi.abs().amax(-1)
    torch.testing.assert_close(xi.norm(dim=-1), math.sqrt(30) * linf)
    # Flat: every coordinate has the same magnitude.
    torch.testing.assert_close(xi.abs(), linf[:, None].expand(-1, 30))
    with pytest.raises(ValueError, match="scale"):
        sx.radial_noise(2, 3, SymmetricAlphaStable(1.6), 0.0, g)


def test_cost_and_distance_scales():
    c = sx.make_cost(7, 0)
    assert float(c[0]) == 0.0 and bool(((c[1:] >= 0.5) & (c[1:] <= 1.0)).all())
    with pytest.raises(ValueError, match="d must be"):
        sx.make_cost(1, 0)
    # D^2 / 2 bounds the Bregman distance from the centre to the optimum e_1.
    for d in (10, 1000):
        assert sx.distance_scale("entropy", d) ** 2 / 2 == pytest.approx(math.log(d))
    assert sx.distance_scale("euclidean", 10) ** 2 == pytest.approx(2.0)
    with pytest.raises(ValueError, match="method must be"):
        sx.distance_scale("pnorm", 10)
    assert sx.noise_bounds(100, 0.2) == pytest.approx({"entropy": 0.2, "euclidean": 2.0})


def test_noise_free_entropic_run_matches_the_closed_form():
    c = sx.make_cost(6, 1)
    T, eta = 40, 0.3
    gaps = sx.run_smd(c, "entropy", T, 2, eta, None, 1.0, torch.Generator())
    # Exponentiated gradient on a linear cost: x_t = softmax(-eta (t - 1) c).
    xs = torch.stack([torch.softmax(-eta * t * c, -1) for t in range(T)])
    torch.testing.assert_close(gaps, (xs.mean(0) @ c).expand(2))


def test_projected_sgd_reduces_the_gap_and_rejects_unknown_methods():
    c = sx.make_cost(20, 2)
    g = torch.Generator().manual_seed(0)
    start = float(c.mean())
    gaps = sx.run_smd(c, "euclidean", 300, 8, 0.05, SymmetricAlphaStable(1.6), 0.01, g)
    assert gaps.shape == (8,) and float(gaps.max()) < 0.5 * start
    with pytest.raises(ValueError, match="method must be"):
        sx.run_smd(c, "pnorm", 3, 1, 0.1, None, 1.0, g)


def test_d_slope_and_interval_check():
    g = torch.Generator().manual_seed(3)
    dims = torch.tensor([10.0, 100.0, 1000.0], dtype=torch.float64)
    errs = dims[:, None] ** 0.5 * torch.exp(0.1 * torch.randn(3, 200, generator=g))
    point, slopes = sx.bootstrap_d_slope(dims.log(), errs.double(), 200, g)
    assert point == pytest.approx(0.5, abs=0.02) and slopes.shape == (200,)
    assert sx.within((0.5, 0.45, 0.55), 0.5, 0.1) and not sx.within((0.5, 0.3, 0.55), 0.5, 0.1)


def test_experiment_is_registered():
    eps = entry_points(group="frontier_opt.experiments")
    assert "heavytail-sgd.simplex" in {e.name for e in eps}


def test_quick_path_runs_end_to_end_at_a_tiny_size(tmp_path, monkeypatch):
    monkeypatch.setattr(sx, "_sizes", lambda ctx: ([20, 60, 180], 6, 20))
    monkeypatch.setattr(sx, "DIMS", (4, 16, 64))
    assert sx.main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "result.json").read_text())
    assert len(res["table"]) == len(sx.METHODS) * 3
    m = res["metrics"]
    assert res["holds"] == (m["holds_T"] and m["holds_d"])
    assert m["holds_T"] == all(r["T_slope_ok"] for r in res["table"])
    assert all(len(r["median_gap"]) == 3 for r in res["table"])
    assert all((tmp_path / png).is_file() for png in res["plots"])
