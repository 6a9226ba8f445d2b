"""Each experiment's quick path on a tiny config, and the registration."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest
import torch

from adaptive_lmo.experiments import _common
from adaptive_lmo.experiments import teacher_student as ts
from shared_core.experiment import RunContext

TINY_GRIDS = {"AdamW": [3e-3], "Muon": [0.05], "SGD": [0.05], "AdaptiveLMO": [0.05]}


def test_teacher_student_tiny(tmp_path, monkeypatch):
    monkeypatch.setattr(ts, "grids", lambda k: TINY_GRIDS)
    cfg = {"d": 6, "h": 8, "n": 128, "steps": 12, "batch": 16, "seeds": 2, "grid": 1}
    res = ts.run(RunContext(tmp_path, True, False, 0), cfg)
    assert isinstance(res.holds, bool)
    assert (tmp_path / "exponents.png").is_file() and (tmp_path / "loss.png").is_file()
    assert len(res.table) == 6
    assert all(math.isfinite(res.metrics[f"test_mse_mean[{o}]"]) for o in _common.OPTIMIZERS)
    for k, v in res.metrics.items():
        if k.startswith("final_exponent"):
            assert 0.0 <= v <= 1.0


def test_image_tiny(tmp_path, monkeypatch):
    pytest.importorskip("sklearn")
    from adaptive_lmo.experiments import image

    monkeypatch.setattr(image, "grids", lambda k: TINY_GRIDS)
    cfg = {"h": 8, "steps": 10, "batch": 32, "seeds": 2, "grid": 1}
    res = image.run(RunContext(tmp_path, True, False, 0), cfg)
    assert 0.0 <= res.metrics["test_acc_mean[AdaptiveLMO]"] <= 1.0
    assert isinstance(res.holds, bool)


def test_lm_tiny(tmp_path, monkeypatch):
    from adaptive_lmo.experiments import lm

    monkeypatch.setattr(lm, "grids", lambda k: TINY_GRIDS)
    cfg = {
        "V": 6,
        "T": 5,
        "n": 64,
        "d": 8,
        "layers": 1,
        "steps": 6,
        "batch": 8,
        "seeds": 2,
        "grid": 1,
    }
    res = lm.run(RunContext(tmp_path, True, False, 0), cfg)
    assert all(math.isfinite(res.metrics[f"test_loss_mean[{o}]"]) for o in _common.OPTIMIZERS)
    assert isinstance(res.holds, bool) and (tmp_path / "exponents.png").is_file()


def test_lm_corpus_is_markov_and_offline():
    from adaptive_lmo.experiments import lm

    d = lm.make_corpus(5, 7, 20, 0)
    x, y = d["train"]
    assert x.shape == y.shape == (20, 7)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    assert torch.equal(lm.make_corpus(5, 7, 20, 0)["test"][0], d["test"][0])


def test_verdict_is_computed_from_the_numbers():
    def fake(means, higher):
        return _common.SweepResult({o: {} for o in means}, {}, means, {}, higher)

    ok, best, _ = _common.verdict(fake({"Muon": 1.0, "AdamW": 2.0, "AdaptiveLMO": 1.01}, False))
    assert ok and best == "Muon"
    ok, _, _ = _common.verdict(fake({"Muon": 1.0, "AdamW": 2.0, "AdaptiveLMO": 1.05}, False))
    assert not ok
    ok, best, _ = _common.verdict(fake({"Muon": 0.9, "AdamW": 0.95, "AdaptiveLMO": 0.94}, True))
    assert not ok and best == "AdamW"


def test_registered_as_headline_experiments():
    py = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    eps = py["project"]["entry-points"]["frontier_opt.experiments"]
    assert eps["adaptive-lmo.teacher-student"] == "adaptive_lmo.experiments.teacher_student"
    assert eps["adaptive-lmo.image"] == "adaptive_lmo.experiments.image"
    assert eps["adaptive-lmo.lm"] == "adaptive_lmo.experiments.lm"
