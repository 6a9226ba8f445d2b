"""The attention teacher: valid distributions, POMO loss, checkpoints, shipped data."""

import math
import tomllib
from pathlib import Path

import pytest
import torch

from epb.policy import DATA, AttentionPolicy, FunctionTeacher, load_teacher
from epb.problems import RolloutState, random_cvrp, random_tsp
from epb.reference import load_test_set
from epb.rollout import multistart, rollout
from epb.train import pomo_loss


@pytest.mark.parametrize("kind", ["tsp", "cvrp"])
def test_policy_distributions_are_valid_and_repeats_match(kind, tmp_path):
    torch.manual_seed(0)
    pol = AttentionPolicy(kind, dim=16, layers=1, heads=4).eval()
    inst = (random_tsp if kind == "tsp" else random_cvrp)(3, 7, torch.Generator().manual_seed(1))
    st = RolloutState.start(inst)
    with torch.no_grad():
        lp = pol.bind(inst)(st)
        p = lp.exp()
        assert torch.allclose(p.sum(-1), torch.ones(3), atol=1e-5)
        assert (p[~st.feasible()] == 0).all()
        # the repeated (multi-start) binding gives the same rows as binding the copies
        lp2 = pol.bind(inst, 2)(RolloutState.start(inst.repeat(2)))
        assert torch.allclose(lp2[::2], lp, atol=1e-5) and torch.allclose(lp2[1::2], lp, atol=1e-5)
    pol.save(tmp_path / "ck.pt", note=1)
    back = AttentionPolicy.load(tmp_path / "ck.pt")
    with torch.no_grad():
        assert torch.allclose(back.bind(inst)(st).exp(), p, atol=2e-2)
    assert back.checkpoint_meta["note"] == 1


def test_pomo_gradient_step_is_finite():
    torch.manual_seed(0)
    pol = AttentionPolicy("tsp", dim=16, layers=1, heads=2)
    loss, mean_len = pomo_loss(pol, random_tsp(4, 6, torch.Generator().manual_seed(0)))
    loss.backward()
    assert math.isfinite(loss.item()) and mean_len > 0
    assert all(torch.isfinite(p.grad).all() for p in pol.parameters() if p.grad is not None)


def test_function_teacher_adapter():
    t = FunctionTeacher(lambda s: -s.dist[torch.arange(len(s.current)), s.current], 0.01)
    inst = random_tsp(2, 6, torch.Generator().manual_seed(0))
    out = rollout(t.bind(inst), inst)
    from epb.heuristics import nearest_neighbour

    assert torch.allclose(out.lengths, nearest_neighbour(inst))
    with pytest.raises(ValueError, match="temperature"):
        FunctionTeacher(lambda s: s, 0.0)


def test_shipped_checkpoint_and_test_sets():
    ck = DATA / "teacher_tsp20.pt"
    assert ck.stat().st_size < 2_000_000
    pol = load_teacher("tsp", 20)
    inst, ref = load_test_set("tsp20", 8)
    assert inst.coords.shape == (8, 20, 2) and (ref > 0).all()
    ms = multistart(pol.bind, inst)
    assert (ms >= ref - 1e-4).all()  # LKH references are (near-)optimal
    assert float((ms / ref - 1).mean()) < 0.1
    for name in ("tsp50", "cvrp20"):
        inst, ref = load_test_set(name, 2)
        assert inst.size == 2


def test_package_data_and_entry_points_declared():
    root = Path(__file__).parents[1]
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    eps = meta["project"]["entry-points"]["frontier_opt.experiments"]
    assert eps == {"epb.tsp": "epb.experiments.tsp"}  # the main job's (quick tsp ~40 s)
    extra = meta["project"]["entry-points"]["frontier_opt.experiments.extra"]
    assert extra == {"epb.cvrp": "epb.experiments.cvrp"}
