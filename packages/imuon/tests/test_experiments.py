"""The experiments' measuring parts on tiny configurations, and their registration."""

from __future__ import annotations

import pathlib
import tomllib

import pytest
import torch

from imuon.experiments import conditioning, image, lora, subspace

ROOT = pathlib.Path(__file__).parents[1]


def test_registered_as_headline_experiments():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    eps = meta["project"]["entry-points"]["frontier_opt.experiments"]
    for name in ("conditioning", "subspace", "image", "lora"):
        assert eps[f"imuon.{name}"] == f"imuon.experiments.{name}"
        assert callable(globals()[name].main)


def test_conditioning_problem_and_imuon_reaches_the_target():
    prob = conditioning.make_problem(8, 7, 2, 100.0, seed=0)
    ops, y, xstar, _, _ = prob
    s = torch.linalg.svdvals(xstar)
    assert float(s[0] / s[1]) == pytest.approx(100.0)
    torch.testing.assert_close(ops @ xstar.reshape(-1), y)
    ms = conditioning.methods(quick=True)
    factory, lrs = ms["iMuon Frobenius"]
    errs = conditioning.run_method(factory(lrs[-1]), prob, 300)
    assert errs[-1] <= conditioning.TARGET < errs[0]
    factory, lrs = ms["AdamW (factors)"]
    assert conditioning.run_method(factory(lrs[0]), prob, 20)[-1] > conditioning.TARGET


def test_subspace_pieces():
    u, xs, x0 = subspace.make_stream(10, 2, 40, 4, seed=0)
    assert subspace.sin_theta(u, u) == pytest.approx(0.0, abs=1e-7)
    start = subspace.sin_theta(x0, u)
    for method in ("iMuon", "Riemannian SGD"):
        errs = subspace.run_one(method, 0.05, u, xs, x0, [20, 40])
        assert len(errs) == 2 and errs[-1] < start
    assert subspace.eigensolver(u, xs, [40])[0] < start


def test_image_training_runs_and_keeps_the_frame():
    data = image.load_digits_split(0)
    small = tuple(t[:300] for t in data)
    accs, orth = image.train("iMuon", 0.05, small, hidden=8, epochs=2, seed=0)
    assert len(accs) == 2 and accs[-1] > 0.3  # 10 classes: chance is 0.1
    assert orth < 1e-5


def test_lora_pieces():
    a, b = lora.markov_tables(0, shift=0.5)
    torch.testing.assert_close(a.sum(-1), torch.ones(len(a)))
    assert 0 < int((a != b).any(-1).sum()) < len(a)
    data = lora.sample(b, 16, 17, seed=0)
    assert data.shape == (16, 17) and int(data.max()) < lora.VOCAB
    torch.manual_seed(0)
    model = lora.TinyGPT(d=16, layers=1, heads=2, ctx=16)
    before = float(lora.lm_loss(model, data))
    lora.add_lora(model, rank=2)
    assert float(lora.lm_loss(model, data)) == pytest.approx(before, abs=1e-5)
    opts = lora.make_opt("iMuon", model, 0.05)
    for _ in range(15):
        for o in opts:
            o.zero_grad()
        lora.lm_loss(model, data).backward()
        for o in opts:
            o.step()
    assert float(lora.lm_loss(model, data)) < before
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert all("lora_" in n or n.startswith("head.") for n in trainable)
