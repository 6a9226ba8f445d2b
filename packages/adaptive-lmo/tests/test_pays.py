"""The "where adaptivity pays" experiments (issue 33): their data, their rows and their rule."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from adaptive_lmo.experiments import _pays
from adaptive_lmo.experiments._common import RunOutput, SweepResult
from shared_core.experiment import RunContext

TINY = {o: [0.02] for o in _pays.grids(2)}
TINY["AdamW"] = [3e-3]


def _sweep(tests: dict[str, list[float]]) -> SweepResult:
    runs = {
        o: {0.1: [RunOutput(v, v, [v], {"0.weight": [0.0, 0.3]}) for v in vals]}
        for o, vals in tests.items()
    }
    return SweepResult(
        runs=runs,
        best_lr={o: 0.1 for o in tests},
        test_mean={o: sum(v) / len(v) for o, v in tests.items()},
        test_std={o: 0.0 for o in tests},
        higher_is_better=False,
        grids={o: [0.05, 0.1, 0.2] for o in tests},
    )


def test_rule_needs_both_judged_intervals_below_zero():
    """Paired per-seed log ratios: lower than both judged baselines on every seed by a
    consistent margin pays; equal to one of them (or only on average) does not; the
    not-judged rows never decide."""
    cand = [1.0, 2.0, 3.0, 4.0]
    better = [c * 1.1 * (1 + 0.01 * i) for i, c in enumerate(cand)]
    mixed = [c * f for c, f in zip(cand, [1.3, 0.8, 1.25, 0.9], strict=True)]
    worse_rows = {_pays.A0: [c * 0.5 for c in cand], _pays.A1: cand, _pays.FISHER: cand}
    pays, m, lines = _pays.judge(
        _sweep({"AdaptiveLMO": cand, "Muon": better, "AdamW": better, **worse_rows}), "mse"
    )
    assert pays and m["pays"]
    mean, _, hi = m["log_ratio_vs[Muon]"]
    d = np.log(np.array(cand) / np.array(better))
    half = 3.182446305284263 * d.std(ddof=1) / 2  # t_{0.975, 3} s / sqrt(4)
    assert mean == pytest.approx(d.mean()) and hi == pytest.approx(d.mean() + half)
    assert m["final_exponent[0.weight]"] == pytest.approx(0.3)
    assert m["mean_exponent[0.weight]"] == pytest.approx(0.15)
    for muon, adamw in ((better, mixed), (mixed, better), (cand, better)):
        pays, m, _ = _pays.judge(
            _sweep({"AdaptiveLMO": cand, "Muon": muon, "AdamW": adamw, **worse_rows}), "mse"
        )
        assert not pays and not m["pays"]
    assert any("not judged" in line for line in lines)


def test_regression_head_data_and_tiny_run(tmp_path, monkeypatch):
    pytest.importorskip("sklearn")
    from adaptive_lmo.experiments import regression_head as rh

    d = rh.load(3)
    (xt, yt), (xv, _), (xs, _) = d["train"], d["val"], d["test"]
    assert xt.shape[1] == 32 and yt.shape[1] == 32 and len(xt) + len(xv) + len(xs) == 1797
    assert torch.allclose(xt.mean(0), torch.zeros(32), atol=1e-6)  # centred on train
    # the condition number against numpy over the non-null eigenvalues
    ev = np.linalg.eigvalsh((xt.double().T @ xt.double() / len(xt)).numpy())
    ev = ev[ev > ev.max() * 32 * np.finfo(np.float32).eps]
    assert rh.condition_number(xt) == pytest.approx(ev.max() / ev.min(), rel=1e-6)
    assert rh.condition_number(xt) > 1e3  # the setting's premise: ill-conditioned inputs
    monkeypatch.setattr(rh, "grids", lambda k, scale=1.0: TINY)
    cfg = {"h": 8, "steps": 12, "batch": 32, "seeds": 2, "grid": 1, "workers": 1}
    res = rh.run(RunContext(tmp_path, True, False, 0), cfg)
    _check_tiny(res)


def test_finetune_data_and_tiny_run(tmp_path, monkeypatch):
    pytest.importorskip("sklearn")
    from adaptive_lmo.experiments import finetune as ft

    d = ft.load(5, shots=4)
    up_x, up_y = d["upstream"]
    assert set(up_y.tolist()) == set(ft.UPSTREAM)
    for split, per in (("train", 4), ("val", 30)):
        y = d[split][1]
        assert sorted(set(y.tolist())) == [0, 1, 2, 3, 4]
        assert all(int((y == c).sum()) == per for c in range(5))
    # no downstream image appears in two splits or upstream
    rows = [tuple(r.tolist()) for s in ("train", "val", "test") for r in d[s][0]]
    assert len(d["test"][0]) == 1797 - len(up_x) - 5 * 34
    assert len(set(rows)) >= len(rows) - 5  # digits has a few duplicate images
    monkeypatch.setattr(ft, "grids", lambda k, scale=1.0: TINY)
    cfg = {"h": 8, "shots": 4, "pre_steps": 5, "steps": 6, "batch": 10, "seeds": 2, "grid": 1,
           "workers": 1}  # fmt: skip
    res = ft.run(RunContext(tmp_path, True, False, 0), cfg)
    _check_tiny(res)


def _check_tiny(res) -> None:
    m = res.metrics
    assert [r["optimizer"] for r in res.table] == list(TINY)
    assert all(math.isfinite(r[next(k for k in r if k.endswith("_mean"))]) for r in res.table)
    # the verdict is the stated rule applied to the reported intervals
    assert res.holds == (m["log_ratio_vs[Muon]"][2] < 0 and m["log_ratio_vs[AdamW]"][2] < 0)
    assert "fisher_final_exponent[0.weight]" in m
    assert (Path(res.plots[0]).name if res.plots else "") == "exponents.png"


def test_registered_as_extra_experiments():
    py = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    extra = py["project"]["entry-points"]["frontier_opt.experiments.extra"]
    assert extra["adaptive-lmo.regression-head"] == "adaptive_lmo.experiments.regression_head"
    assert extra["adaptive-lmo.finetune"] == "adaptive_lmo.experiments.finetune"
