"""The lm-bits experiment: its Markov text and its quick path at a tiny size."""

import json

import torch

from diloco_ef.experiments import lm_bits as L

TINY = L.Config(
    vocab=5,
    embed=3,
    hidden=7,
    workers=2,
    steps=16,
    inner_steps=4,
    batch=8,
    tokens=301,
    ddp_lrs=(0.1, 0.3),
)


def test_sampled_text_has_the_chain_transition_frequencies():
    p = L.make_chain(3, seed=1)
    assert torch.allclose(p.sum(-1), torch.ones(3, 3, dtype=torch.float64))
    text = L.sample_text(p, 40000, seed=2)
    counts = torch.zeros(3, 3, 3, dtype=torch.float64)
    counts.index_put_(
        (text[:-2], text[1:-1], text[2:]), torch.ones(39998, dtype=torch.float64), accumulate=True
    )
    n = counts.sum(-1, keepdim=True)
    seen = n.squeeze(-1) >= 500  # sharp chains leave some contexts (almost) unvisited
    assert int(seen.sum()) >= 3
    freq = counts / n.clamp_min(1)
    # binomial standard error per cell (plus one count for cells with p near 0)
    se = (p * (1 - p) / n.clamp_min(1)).sqrt() + 1 / n.clamp_min(1)
    assert bool(((freq - p).abs() <= 5 * se)[seen].all())
    wrong = L.make_chain(3, seed=9)  # a different chain is rejected by the same check
    assert not bool(((freq - wrong).abs() <= 5 * se)[seen].all())


def test_quick_path_runs_end_to_end_at_a_tiny_size(tmp_path, monkeypatch):
    monkeypatch.setattr(L, "QUICK", TINY)
    assert L.main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "result.json").read_text())
    assert res["paper"] == "P17" and isinstance(res["holds"], bool) and res["measured"]
    r = res["metrics"]["results"]
    assert len(r) == 7 and all((tmp_path / p).is_file() for p in res["plots"])
    params = sum(p.numel() for p in L.TinyLM(5, 3, 7).parameters())
    ddp = r[res["metrics"]["ddp_best"]]
    assert ddp["loss"] == min(r["DDP lr=0.1"]["loss"], r["DDP lr=0.3"]["loss"])
    assert ddp["bytes"] == 2 * 16 * params * 4  # dense float32, every step, two workers
    assert r["DiLoCo H=4"]["bytes"] == ddp["bytes"] / 4
    expected = any(
        v["loss"] <= (1 + L.LOSS_TOL) * ddp["loss"] and ddp["bytes"] / v["bytes"] >= L.BYTES_FACTOR
        for k, v in r.items()
        if k.startswith("DiLoCo-EF")
    )
    assert res["holds"] == expected
