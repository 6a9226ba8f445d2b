"""lm-bits-long-wire: the selection rule, and measured bytes of DDP and PowerSGD on the tiny
LM against a count from the parameter shapes and the ring formulas."""

from __future__ import annotations

from dataclasses import replace

import pytest

from diloco_ef.experiments import lm_bits as L
from diloco_ef.experiments import lm_bits_long_wire as W


def _res(**kw):
    base = {"role": "DiLoCo-EF", "val": 1.0, "wire_sent": 1.0}
    return {**base, **kw}


def test_pick_takes_the_lowest_validation_among_500x_measured():
    res = {
        "DDP a": _res(role="DDP", val=1.6, wire_sent=1000.0),
        "DDP b": _res(role="DDP", val=1.5, wire_sent=1000.0),
        "cheap but bad": _res(val=1.9, wire_sent=1.0),
        "good but 400x": _res(val=1.4, wire_sent=2.5),
        "picked": _res(val=1.7, wire_sent=2.0),
    }
    assert W.pick(res) == ("DDP b", "picked")
    res["picked"]["wire_sent"] = 2.5
    res["cheap but bad"]["wire_sent"] = 2.5
    assert W.pick(res) == ("DDP b", None)


def test_methods_use_the_step_rule_and_the_stated_grids():
    cfg = replace(L.LONG_FULL, workers=4)
    ms = W.methods(cfg, quick=False)
    assert [m.name for m in ms if m.role == "DDP"] == ["DDP lr=0.05 mom=0.9", "DDP lr=0.1 mom=0.9"]
    ef = [m for m in ms if m.role == "DiLoCo-EF"]
    assert len(ef) == len(W.CANDIDATES)
    for m in ef:  # eta_l = c / (H sqrt(T)), T = 2048 / H
        assert m.inner_lr == pytest.approx(80.0 / (m.h * (2048 / m.h) ** 0.5), rel=1e-15)


@pytest.mark.parametrize("workers", [4, 8])
def test_measured_bytes_of_ddp_and_powersgd_from_the_shapes(workers):
    # One 64-step stretch: DDP all-reduces 1728 float32 values and one flag per step;
    # PowerSGD rank 1 at H=64 all-reduces P (16+48+16) and the biases (48+16), then Q (8+16+48),
    # once, plus one flag. Ring all-reduce: 2(M-1)/M per byte; the flags' all-gather: M-1.
    cfg = replace(L.LONG_FULL, workers=workers, steps=64, tokens=400, heldout=400)
    data = L.make_data(cfg, 0)
    ring = 2 * (workers - 1) / workers
    ddp = L.run_method(L.Method("ddp", "DDP", "none", 1, 1.0, 0.05, 0.9), cfg, data, 0)
    assert ddp["wire_sent"] == pytest.approx(64 * (ring * 4 * 1728 + (workers - 1)))
    ps = L.Method("p", "DiLoCo-EF", "powersgd1", 64, 0.01, 0.9, 0.0)
    got = L.run_method(ps, cfg, data, 0)
    assert got["wire_sent"] == pytest.approx(ring * 4 * (80 + 64 + 72) + (workers - 1))
    assert got["bytes"] == workers * 4 * 216  # message size: all workers' factors and biases
    assert ddp["wire_sent"] / got["wire_sent"] > 500


@pytest.mark.slow
def test_quick_run_end_to_end(tmp_path, monkeypatch):
    from shared_core.experiment import RunContext

    monkeypatch.setenv("DILOCO_EF_PROCS", "1")
    res = W.run(RunContext(out_dir=tmp_path, quick=True, full=False, seed=0))
    m4 = res.metrics["per_workers"]["4"]
    assert set(res.metrics["per_workers"]) == {"4"} and res.metrics["seeds"] == [0]
    ddp = m4["results"][m4["ddp"]]
    # DDP: 256 steps of 1728 float32 values plus a flag each, ring all-reduce at M = 4
    assert ddp["wire_sent"] == pytest.approx(256 * (1.5 * 4 * 1728 + 3))
    assert m4["pick"] is not None  # both quick candidates are at H = 128: > 500x measured
    for r in m4["results"].values():
        assert r["wire_reduction"] == pytest.approx(ddp["wire_sent"] / r["wire_sent"])
    assert res.holds == (m4["ratio"] <= 1.02)
