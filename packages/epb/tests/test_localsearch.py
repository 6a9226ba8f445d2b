"""Local search and the savings primitives against independent brute-force references."""

import itertools
import math

import numpy as np
import pytest
import torch

from epb.features import node_features
from epb.heuristics import cvrp_nearest_neighbour, savings
from epb.localsearch import (
    improve,
    improve_batch,
    routes_from_actions,
    savings_routes,
    savings_structure,
    solution_length,
)
from epb.problems import RolloutState, random_cvrp
from epb.rollout import greedy, multistart


def _length(routes, pts):
    return sum(math.dist(pts[a], pts[b]) for r in routes for a, b in itertools.pairwise([0, *r, 0]))


def _feasible(routes, dem, n):
    served = sorted(c for r in routes for c in r)
    return served == list(range(1, n)) and all(sum(dem[c] for c in r) <= 1 + 1e-6 for r in routes)


def _neighbours(routes, dem):
    """Every single 2-opt / relocate / exchange move, written out by hand."""
    out = []
    for ri, r in enumerate(routes):  # 2-opt: reverse r[i..j]
        for i in range(len(r)):
            for j in range(i + 1, len(r)):
                new = [list(x) for x in routes]
                new[ri] = r[:i] + r[i : j + 1][::-1] + r[j + 1 :]
                out.append(new)
    for ri, r in enumerate(routes):  # relocate customer u anywhere (or to a new route)
        for u in r:
            base = [[c for c in x if c != u] for x in routes]
            for ti in range(len(base) + 1):
                tgt = base[ti] if ti < len(base) else []
                if ti != ri and sum(dem[c] for c in tgt) + dem[u] > 1 + 1e-6:
                    continue
                for pos in range(len(tgt) + 1):
                    new = [list(x) for x in base] + ([[]] if ti == len(base) else [])
                    new[ti] = [*tgt[:pos], u, *tgt[pos:]]
                    out.append([x for x in new if x])
    for ri, rj in itertools.combinations(range(len(routes)), 2):  # exchange across routes
        for u in routes[ri]:
            for v in routes[rj]:
                new = [[v if c == u else u if c == v else c for c in x] for x in routes]
                if all(sum(dem[c] for c in x) <= 1 + 1e-6 for x in new):
                    out.append(new)
    return out


@pytest.mark.parametrize(("n", "seed"), [(7, 0), (9, 3), (13, 5)])
def test_improve_reaches_a_local_optimum_of_all_three_neighbourhoods(n, seed):
    inst = random_cvrp(3, n, torch.Generator().manual_seed(seed))
    for b in range(inst.size):
        pts = inst.coords[b].double().tolist()
        dem = inst.demand[b].double().tolist()
        d = torch.cdist(inst.coords[b].double(), inst.coords[b].double()).numpy()
        rng = np.random.default_rng(seed + b)
        start, cur = [], []  # random order, a new route whenever the next one does not fit
        for c in rng.permutation(np.arange(1, n + 1)).tolist():
            if sum(dem[x] for x in cur) + dem[c] > 1:
                start.append(cur)
                cur = []
            cur.append(c)
        start.append(cur)
        out = improve(start, d, np.array(dem))
        assert _feasible(out, dem, n + 1)
        best = _length(out, pts)
        assert best < _length(start, pts)
        assert math.isclose(solution_length(out, d), best, rel_tol=1e-12)
        for nb in _neighbours(out, dem):
            assert _length(nb, pts) >= best - 1e-9


def test_improve_never_worsens_and_rejects_unknown_operators():
    inst = random_cvrp(5, 11, torch.Generator().manual_seed(8))
    sols = savings_routes(inst)
    before = savings(inst)
    for ops in [("two_opt",), ("relocate",), ("exchange",), ("two_opt", "relocate", "exchange")]:
        after = improve_batch(inst, sols, ops)
        assert (after <= before + 1e-5).all()
    with pytest.raises(ValueError, match="unknown"):
        improve(sols[0], inst.dist()[0].numpy(), inst.demand[0].numpy(), ("or_opt",))


def test_savings_routes_are_feasible_and_structure_matches_routes():
    inst = random_cvrp(4, 12, torch.Generator().manual_seed(11))
    routes = savings_routes(inst)
    link, rid = savings_structure(inst)
    for b, rs in enumerate(routes):
        dem = inst.demand[b].tolist()
        assert _feasible(rs, dem, inst.n)
        assert math.isclose(
            _length(rs, inst.coords[b].double().tolist()), float(savings(inst)[b]), rel_tol=1e-5
        )
        # savings never loses to one route per customer and merges are by positive savings
        assert _length(rs, inst.coords[b].double().tolist()) <= _length(
            [[c] for c in range(1, inst.n)], inst.coords[b].double().tolist()
        )
        # parallel savings is maximal: every pair of route ends that could still be joined
        # (different routes; savings are >= 0 in the plane) would overload the vehicle
        for ra, rb in itertools.combinations(rs, 2):
            assert sum(dem[c] for c in ra + rb) > 1 + 1e-6
        for k, r in enumerate(rs):
            assert (rid[b, r] == k).all()
            for u, v in itertools.pairwise([0, *r, 0]):
                assert link[b, u, v] and link[b, v, u]
        assert int(link[b].sum()) == 2 * sum(len(r) + 1 for r in rs) - 2 * sum(
            1 for r in rs if len(r) == 1
        )
    # repeated rows reuse the parent's structure
    rep = inst.repeat(3)
    l2, r2 = savings_structure(rep)
    assert torch.equal(l2, link.repeat_interleave(3, 0)) and torch.equal(
        r2, rid.repeat_interleave(3, 0)
    )


def test_savings_features_follow_the_clarke_wright_routes():
    inst = random_cvrp(3, 10, torch.Generator().manual_seed(4))
    routes = savings_routes(inst)
    first = torch.tensor([routes[b][0][0] for b in range(3)])
    st = RolloutState.start(inst).step(first)
    f = node_features(st)
    for b in range(3):
        r = routes[b][0]
        # the first customer of a savings route is linked to the depot and its successor
        want = sorted({0, r[1] if len(r) > 1 else 0})
        assert f["cw_link"][b].nonzero().squeeze(-1).tolist() == want
        assert f["cw_route"][b].nonzero().squeeze(-1).tolist() == sorted(r)
        d = inst.dist()[b]
        c = int(first[b])
        assert torch.allclose(f["saving"][b], d[0, c] + d[0] - d[c], atol=1e-6)


def test_rollout_actions_give_the_rollout_length():
    inst = random_cvrp(6, 9, torch.Generator().manual_seed(2))
    lengths, acts = cvrp_nearest_neighbour(inst, return_actions=True)
    for b in range(inst.size):
        d = torch.cdist(inst.coords[b].double(), inst.coords[b].double()).numpy()
        assert math.isclose(
            solution_length(routes_from_actions(acts[b]), d), float(lengths[b]), rel_tol=1e-5
        )

    def bind(i, r):
        return lambda st: -st.dist[torch.arange(len(st.current)), st.current]

    for fn in (greedy, multistart):
        lengths, acts = fn(bind, inst, return_actions=True)
        assert torch.allclose(lengths, fn(bind, inst))
        for b in range(inst.size):
            d = torch.cdist(inst.coords[b].double(), inst.coords[b].double()).numpy()
            rs = routes_from_actions(acts[b])
            assert _feasible(rs, inst.demand[b].tolist(), inst.n)
            assert math.isclose(solution_length(rs, d), float(lengths[b]), rel_tol=1e-5)


def test_cvrp_state_stages_are_positions_within_each_episode():
    from epb.policy import FunctionTeacher
    from epb.portfolio import collect_states

    inst = random_cvrp(3, 8, torch.Generator().manual_seed(6))
    teacher = FunctionTeacher(lambda s: -s.dist[torch.arange(len(s.current)), s.current], 0.1)
    bank = collect_states(teacher, inst, starts=2)
    # the teacher is greedy nearest neighbour: its episodes are those of an independent rollout
    from epb.rollout import rollout

    first = torch.tensor([1, 2] * 3)
    out = rollout(
        lambda st: -st.dist[torch.arange(len(st.current)), st.current], inst.repeat(2), first
    )
    expected = []
    for a in out.actions.tolist():
        # decisions after the forced first customer, until back at the depot with all served
        steps = len(a) - 1
        while steps > 0 and a[steps] == 0 and a[steps - 1] == 0:
            steps -= 1
        expected += [k / steps for k in range(steps)]
    assert sorted(bank.stage.tolist()) == pytest.approx(sorted(min(x, 0.999) for x in expected))
