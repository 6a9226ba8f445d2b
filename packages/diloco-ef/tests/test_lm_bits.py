"""The lm-bits experiment: its Markov text and its quick path at a tiny size."""

import json

import pytest
import torch

from diloco_ef.experiments import lm_bits as L

TINY = L.Config(
    vocab=5,
    embed=3,
    hidden=7,
    workers=2,
    steps=16,
    batch=8,
    tokens=301,
    heldout=203,
    seeds=(0, 1),
    ddp=((0.1, 0.9), (0.3, 0.9)),
    ef=(("absmax-4b", 4),),
    outer=((0.7, 0.9), (0.9, 0.8)),
    c=4.0,
    references=False,
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
    m = res["metrics"]
    r = m["results"]
    assert len(r) == 4 and all((tmp_path / p).is_file() for p in res["plots"])
    assert all(len(v["loss_per_seed"]) == 2 for v in r.values())
    # Each side's pick is its lowest seed-mean validation loss, reported on the test text.
    for role, key in (("DDP", "ddp_best"), ("DiLoCo-EF", "ef_best")):
        mine = {k: v for k, v in r.items() if v["role"] == role}
        assert len(mine) == 2 and m[key] == min(mine, key=lambda k: mine[k]["val"])
        for v in mine.values():
            assert v["loss"] == pytest.approx(sum(v["loss_per_seed"]) / 2, rel=1e-12)
    ddp, ef = r[m["ddp_best"]], r[m["ef_best"]]
    # Bytes, recomputed from the parameter shapes: dense float32 every step from two workers;
    # 4-bit levels plus one float32 scale per tensor every H=4 steps.
    shapes = [p.numel() for p in L.TinyLM(5, 3, 7).parameters()]
    assert ddp["bytes"] == 2 * 16 * sum(shapes) * 4
    assert ef["bytes"] == 2 * (16 // 4) * (4 * sum(shapes) + 32 * len(shapes)) / 8
    # The rule eta_l = c / (H sqrt(T)) with c = 4, H = 4, T = 4.
    assert ef["inner_lr"] == pytest.approx(4.0 / (4 * 2))
    ratio = ef["loss"] / ddp["loss"]
    assert m["loss_ratio"] == pytest.approx(ratio, rel=1e-12)
    # The two picks trained again by two gloo worker processes reproduce the simulation's
    # first seed: same bytes, test loss to float32 round-off.
    procs = m["processes"]
    assert set(procs) == {m["ddp_best"], m["ef_best"]}
    for name, p in procs.items():
        assert p["world_size"] == 2
        assert p["simulated_loss"] == r[name]["loss_per_seed"][0]
        assert p["process_bytes"] == p["simulated_bytes"]
        assert p["loss_rel_diff"] <= 1e-6
    assert m["processes_agree"] is True
    assert res["holds"] == (ratio <= 1 + L.LOSS_TOL and ddp["bytes"] / ef["bytes"] >= 500)


def test_process_rerun_is_one_worker_per_rank():
    # Each rank trains only its own worker: with a wrong rank-to-data mapping (every rank on
    # worker 0's text) the processes would no longer match the simulation.
    data = L.make_data(TINY, 3)
    m = L.methods_for(TINY)[2]  # a DiLoCo-EF configuration: compression and error feedback
    sim = L.run_method(m, TINY, data, 3)
    got = L.run_as_processes(m, TINY, 3)
    assert got["bytes"] == sim["bytes"] and got["world_size"] == 2
    assert got["loss"] == pytest.approx(sim["loss"], rel=1e-6)
    one = L.run_method(
        m, TINY, {**data, "ctx": [data["ctx"][0]] * 2, "nxt": [data["nxt"][0]] * 2}, 3
    )
    assert abs(one["loss"] - sim["loss"]) > 1e-4


def test_grids_have_equal_budgets_and_fit_the_step_count():
    for cfg in (L.QUICK, L.FULL, L.LONG_QUICK, L.LONG_FULL):
        ms = L.methods_for(cfg)
        assert len({m.name for m in ms}) == len(ms)
        n_ddp = sum(m.role == "DDP" for m in ms)
        assert n_ddp == sum(m.role == "DiLoCo-EF" for m in ms) == len(cfg.ddp)
        assert all(cfg.steps % m.h == 0 for m in ms)
    with pytest.raises(ValueError, match="unequal tuning budgets"):
        L.methods_for(L.Config(ddp=((0.1, 0.9),)))
    with pytest.raises(ValueError, match="unknown compressor"):
        L.make_compressor("zip")


def test_long_configs_change_only_the_horizon_and_references():
    for short, long in ((L.QUICK, L.LONG_QUICK), (L.FULL, L.LONG_FULL)):
        assert long.steps == 2 * short.steps
        assert (long.ddp, long.ef, long.outer, long.c, long.seeds) == (
            short.ddp,
            short.ef,
            short.outer,
            short.c,
            short.seeds,
        )
    names = [m.name for m in L.methods_for(L.LONG_QUICK) if m.role == "reference"]
    assert len(names) == len(L.LONG_REFS) and any("lowrank" in n for n in names)
    # the rule at the doubled horizon: c / (H sqrt(T)) with T = 2048 / 64 = 32
    ef = [m for m in L.methods_for(L.LONG_QUICK) if m.role == "DiLoCo-EF" and m.h == 64]
    assert all(m.inner_lr == pytest.approx(80.0 / (64 * 32**0.5)) for m in ef)


def test_schedule_factor():
    import math

    assert [L.schedule_factor("constant", r, 4) for r in range(4)] == [1.0] * 4
    got = [L.schedule_factor("cosine", r, 8) for r in range(8)]
    assert got == pytest.approx([(1 + math.cos(math.pi * r / 8)) / 2 for r in range(8)])
    assert got[0] == 1.0 and got[4] == pytest.approx(0.5) and got[-1] > 0
    with pytest.raises(ValueError, match="outside"):
        L.schedule_factor("cosine", 8, 8)
    with pytest.raises(ValueError, match="unknown schedule"):
        L.schedule_factor("step", 0, 8)
