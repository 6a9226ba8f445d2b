"""Environments, rollouts, classic heuristics and LKH references against brute force."""

import itertools
import math

import pytest
import torch

from epb.heuristics import cvrp_nearest_neighbour, insertion, nearest_neighbour, savings
from epb.problems import RolloutState, random_cvrp, random_tsp, tour_length
from epb.rollout import multistart, rollout


def brute_force_tsp(coords: torch.Tensor) -> float:
    n = coords.shape[0]
    d = torch.cdist(coords.double(), coords.double())
    best = math.inf
    for perm in itertools.permutations(range(1, n)):
        tour = (0, *perm)
        best = min(best, sum(float(d[tour[i], tour[(i + 1) % n]]) for i in range(n)))
    return best


def python_nearest_neighbour(coords: torch.Tensor) -> float:
    pts = coords.double().tolist()
    n, cur, left, total = len(pts), 0, set(range(1, len(pts))), 0.0
    for _ in range(n - 1):
        nxt = min(left, key=lambda j: math.dist(pts[cur], pts[j]))
        total += math.dist(pts[cur], pts[nxt])
        left.remove(nxt)
        cur = nxt
    return total + math.dist(pts[cur], pts[0])


def test_rollout_builds_permutations_and_lengths_match_tour_length():
    inst = random_tsp(5, 11, torch.Generator().manual_seed(3))
    out = rollout(lambda st: torch.randn(st.current.shape[0], st.n), inst, greedy=True)
    tours = torch.cat([torch.zeros(5, 1, dtype=torch.long), out.actions], 1)
    assert all(sorted(t.tolist()) == list(range(11)) for t in tours)
    assert torch.allclose(out.lengths, tour_length(inst.coords, tours), atol=1e-5)


def test_heuristics_against_brute_force_and_python_reference():
    inst = random_tsp(4, 7, torch.Generator().manual_seed(0))
    nn = nearest_neighbour(inst)
    for b in range(4):
        opt = brute_force_tsp(inst.coords[b])
        assert nn[b].item() == pytest.approx(python_nearest_neighbour(inst.coords[b]), rel=1e-5)
        for rule in ("nearest", "farthest", "cheapest"):
            assert insertion(inst.index(slice(b, b + 1)), rule).item() >= opt - 1e-5
    # multi-start nearest neighbour can only improve on the single start
    from epb.heuristics import nearest_neighbour_step

    ms = multistart(lambda i, r: nearest_neighbour_step, inst)
    assert (ms <= nn + 1e-6).all()


def test_lkh_reference_is_optimal_on_small_instances():
    pytest.importorskip("elkai")
    from epb.reference import lkh_lengths

    inst = random_tsp(3, 8, torch.Generator().manual_seed(1))
    _, lengths = lkh_lengths(inst)
    for b in range(3):
        assert lengths[b].item() == pytest.approx(brute_force_tsp(inst.coords[b]), rel=1e-5)


def test_cvrp_rollouts_respect_capacity_and_visit_every_customer():
    inst = random_cvrp(6, 9, torch.Generator().manual_seed(2))
    out = rollout(lambda st: torch.randn(st.current.shape[0], st.n), inst, greedy=True)
    for b in range(6):
        acts, load = out.actions[b].tolist(), 0.0
        assert sorted(a for a in acts if a) == list(range(1, 9 + 1))
        for a in acts:
            load = 0.0 if a == 0 else load + float(inst.demand[b, a])
            assert load <= 1.0 + 1e-6
    nn, sv = cvrp_nearest_neighbour(inst), savings(inst)
    assert torch.isfinite(nn).all() and torch.isfinite(sv).all()
    assert (sv <= nn * 1.5).all()


def test_feasible_mask_never_empty_and_start_state():
    inst = random_tsp(2, 5)
    st = RolloutState.start(inst, torch.tensor([1, 3]))
    assert st.visited.sum() == 2 and st.feasible().sum(-1).tolist() == [4, 4]
