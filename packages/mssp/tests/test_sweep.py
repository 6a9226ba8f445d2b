"""The experiments' sweep skips only runs that are identical to one already done."""

from __future__ import annotations

import torch

from mssp.experiments import _sweep

CFG = _sweep.SweepConfig(
    base={"N": 8, "Ne": 8, "M": 2, "K": 1, "L": 1},
    scales=(1, 2),
    log2_lrs={},
    steps=3,
    batch=8,
    seeds=1,
    sweep_seeds=1,
)


def test_identical_runs_are_shared_and_others_are_not(monkeypatch):
    monkeypatch.setattr(_sweep, "_DONE", {})
    torch.set_num_threads(1)
    # at the base size every scheme in every regime is the same model: one run
    base = {
        _sweep.run_point(CFG, g, s, "adam", 1, 0.01, 0) for g in ("I", "II") for s in ("sp", "mssp")
    }
    assert len(base) == 1 and len(_sweep._DONE) == 1
    # regime I: muP and MSSP coincide; SP, another lr, regime II and SGD differ
    mup = _sweep.run_point(CFG, "I", "mup", "adam", 2, 0.01, 0)
    assert _sweep.run_point(CFG, "I", "mssp", "adam", 2, 0.01, 0) == mup
    assert len(_sweep._DONE) == 2
    for args in (
        ("I", "sp", "adam", 2, 0.01, 0),
        ("I", "mup", "adam", 2, 0.02, 0),
        ("II", "mup", "adam", 2, 0.01, 0),
        ("I", "mup", "sgd", 2, 0.01, 0),
        ("I", "mup", "adam", 2, 0.01, 1),
    ):
        _sweep.run_point(CFG, *args)
    assert len(_sweep._DONE) == 7
    # a shared value is what training again gives (the runs are deterministic)
    _sweep._DONE.clear()
    assert _sweep.run_point(CFG, "I", "mssp", "adam", 2, 0.01, 0) == mup


def test_pool_is_the_rule_on_seed_averaged_curves():
    # independent reference: numpy mean over runs, argmin per size, drift = max - min index
    import numpy as np

    from mssp.experiments.lr_transfer import pool
    from mssp.tables import REGIMES, SCHEMES

    rng = np.random.default_rng(5)
    grid = [-9, -8, -7, -6, -5]
    runs = [
        {
            "log2_lrs": {"adam": grid},
            "curves": {
                f"adam_{s}_{g}": rng.uniform(0.01, 0.03, (4, len(grid))).tolist()
                for s in SCHEMES
                for g in REGIMES
            },
        }
        for _ in range(3)
    ]
    holds, parts, out = pool(runs)
    drift = {}
    for key in runs[0]["curves"]:
        idx = np.mean([r["curves"][key] for r in runs], axis=0).argmin(axis=1)
        drift[key] = int(idx.max() - idx.min())
        assert out[key] == (drift[key], [grid[i] for i in idx])
    a = all(drift[f"adam_mssp_{g}"] <= 1 for g in REGIMES)
    b = any(drift[f"adam_mup_{g}"] >= 2 for g in REGIMES)
    c = any(drift[f"adam_sp_{g}"] >= 2 for g in REGIMES)
    assert holds == (a and b and c)
    assert parts == {"mssp_within_one_step": a, "mup_drifts": b, "sp_drifts": c}


def test_sgd_sweep_experiment_runs_and_reports_without_verdict(tmp_path, monkeypatch):
    import json

    from mssp.experiments import lr_transfer_sgd

    tiny = _sweep.SweepConfig(
        base={"N": 8, "Ne": 8, "M": 2, "K": 1, "L": 1},
        scales=(1, 2),
        log2_lrs={"sgd": (-2, -1)},
        steps=2,
        batch=8,
        seeds=1,
        sweep_seeds=1,
    )
    monkeypatch.setattr(lr_transfer_sgd, "config", lambda quick, full: tiny)
    monkeypatch.setattr(_sweep, "_DONE", {})
    assert lr_transfer_sgd.main(["--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "result.json").read_text())
    assert res["holds"] is None
    assert set(res["metrics"]["drift"]) == {"sp", "mup", "mssp"}
    curves = res["metrics"]["curves"]["sgd_mssp_II"]
    assert len(curves) == 2 and all(len(c) == 2 for c in curves)
