"""The ef-generalization experiment: its measuring parts and its quick path at a tiny size."""

import json
import math

import pytest
import torch

from diloco_ef.compressors import QSGD, TopK
from diloco_ef.experiments import ef_generalization as eg

TINY = eg.Config(
    seeds=2,
    steps=32,
    rounds=8,
    workers=2,
    inner_steps=2,
    checkpoints=4,
    synthetic_d=24,
    synthetic_train=40,
    synthetic_test=300,
)


def test_logistic_loss_matches_float64_formula(gen):
    x, w = torch.randn(13, 7, generator=gen), torch.randn(7, generator=gen)
    y = torch.where(torch.rand(13, generator=gen) < 0.5, 1.0, -1.0)
    ref = torch.log1p(torch.exp(-y.double() * (x.double() @ w.double()))).mean()
    assert float(eg.logistic_loss(w, x, y)) == pytest.approx(float(ref), rel=1e-6)


def test_checkpoints_contain_quarter_and_horizon():
    pts = eg.checkpoints(256, 16)
    assert pts[-1] == 256 and 64 in pts and pts == sorted(set(pts))


def test_verdict_rule_on_constructed_curves():
    ts = [1, 2, 3, 4]
    alphas = {"top-k": 0.30, "random-k": 0.31, "qsgd": 0.32}
    none = [0.1, 0.2, 0.3, 0.4]
    fade = [g + 0.05 / t for g, t in zip(none, ts, strict=True)]
    fading = {"none": none, **dict.fromkeys(eg.COMPRESSORS, fade)}
    assert eg.verdict(fading, ts, alphas)["holds"]
    grow = [g + 0.001 * t for g, t in zip(none, ts, strict=True)]
    growing = {"none": none, **dict.fromkeys(eg.COMPRESSORS, grow)}
    assert not eg.verdict(growing, ts, alphas)["holds"]
    apart = dict(fading, qsgd=[g + 0.2 for g in none])
    assert not eg.verdict(apart, ts, alphas)["holds"]
    assert not eg.verdict(fading, ts, {**alphas, "qsgd": 0.5})["holds"]


def test_topk_calibration_lands_next_to_the_target():
    data = eg.make_synthetic(24, 40, 50, seed=3)
    target = eg.run_efsgd(data, QSGD(bits=2, contractive=True), TINY, 3, 12)["alpha"]
    k, tried = eg.calibrate_topk(eg.run_efsgd, data, TINY, 3, target, 12)
    err = abs(tried[k] - target)
    # no other k tried by the bisection, nor k +- 1 measured afresh, is closer
    assert all(err <= abs(a - target) for a in tried.values())
    for kk in (k - 1, k + 1):
        if 1 <= kk <= data.dim:
            assert err <= abs(eg.run_efsgd(data, TopK(k=kk), TINY, 3, 12)["alpha"] - target)


@pytest.mark.slow  # importing scikit-learn alone takes seconds
def test_sklearn_datasets_load_standardized():
    pytest.importorskip("sklearn")
    for name, d in (("breast_cancer", 31), ("digits", 65)):
        data = eg.load_sklearn(name, seed=0)
        assert data.dim == d and set(data.y_train.tolist()) == {-1.0, 1.0}
        feats = data.x_train[:, :-1]
        assert torch.allclose(feats.mean(0), torch.zeros(d - 1), atol=1e-4)
        assert torch.all(data.x_train[:, -1] == 1)


def test_quick_path_runs_end_to_end_at_a_tiny_size(tmp_path, monkeypatch):
    monkeypatch.setattr(eg, "QUICK", TINY)
    assert eg.main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "result.json").read_text())
    assert res["paper"] == "P17" and isinstance(res["holds"], bool) and res["measured"]
    assert len(res["table"]) == 2 * 4
    assert all((tmp_path / p).is_file() for p in res["plots"])
    curves = res["metrics"]["curves"]
    rec = curves["synthetic EF-SGD"]
    assert rec["t"][-1] == TINY.steps and math.isfinite(rec["none_gap"][-1])
    expected = all(
        eg.verdict(
            {n: c[f"{n}_gap"] for n in ("none", *eg.COMPRESSORS)},
            c["t"],
            {n: c[f"alpha_{n}"] for n in eg.COMPRESSORS},
        )["holds"]
        for c in curves.values()
    )
    assert res["holds"] == expected
