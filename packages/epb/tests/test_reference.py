"""CVRP reference solutions from PyVRP: feasible, measured like the package measures tours, and
optimal on instances small enough to enumerate."""

import itertools
import math

import pytest
import torch

from epb.localsearch import routes_from_actions
from epb.problems import random_cvrp, tour_length
from epb.reference import SCALE, load_test_set, pyvrp_routes, routes_to_sequence

pytest.importorskip("pyvrp")


def brute_force_cvrp(coords, units, cap) -> float:
    """Exact CVRP optimum: the best route through each customer subset by enumerating orders,
    then the best partition of all customers into capacity-feasible subsets (set-partition DP)."""
    pts = coords.double().tolist()
    k = len(pts) - 1

    def route(sub):
        best = math.inf
        for perm in itertools.permutations(sub):
            path = (0, *perm, 0)
            best = min(best, sum(math.dist(pts[a], pts[b]) for a, b in itertools.pairwise(path)))
        return best

    cost = {}
    for mask in range(1, 1 << k):
        sub = [i + 1 for i in range(k) if mask >> i & 1]
        if sum(units[i] for i in sub) <= cap:
            cost[mask] = route(sub)
    best = {0: 0.0}
    for mask in range(1, 1 << k):
        low = mask & -mask  # the lowest customer left goes into the next route
        rest, b = mask ^ low, math.inf
        sub = rest
        while True:
            part = sub | low
            if part in cost:
                b = min(b, cost[part] + best[mask ^ part])
            if sub == 0:
                break
            sub = (sub - 1) & rest
        best[mask] = b
    return best[(1 << k) - 1]


def check_feasible(routes, demand, n, cap_tol=1e-6):
    visited = sorted(v for r in routes for v in r)
    assert visited == list(range(1, n))  # every customer exactly once, nothing else
    for r in routes:
        assert float(demand[r].double().sum()) <= 1.0 + cap_tol


@pytest.mark.parametrize("case", range(8))
def test_pyvrp_is_optimal_on_tiny_instances(case):
    g = torch.Generator().manual_seed(100 + case)
    k = int(torch.randint(4, 8, (1,), generator=g))  # 4..7 customers
    cap = int(torch.randint(10, 20, (1,), generator=g))  # small capacities: several routes
    coords = torch.rand(k + 1, 2, generator=g)
    units = torch.randint(1, 10, (k + 1,), generator=g)
    units[0] = 0
    demand = units.float() / cap
    routes, length, cost = pyvrp_routes(coords, demand, capacity=cap, iterations=300)
    check_feasible(routes, demand, k + 1)
    assert length == pytest.approx(brute_force_cvrp(coords, units.tolist(), cap), rel=1e-9)
    assert abs(cost / SCALE - length) <= 0.5 * sum(len(r) + 1 for r in routes) / SCALE


def test_pyvrp_cost_matches_package_length_on_cvrp20():
    inst = random_cvrp(3, 20, torch.Generator().manual_seed(7))
    for b in range(3):
        routes, length, cost = pyvrp_routes(inst.coords[b], inst.demand[b], iterations=200)
        check_feasible(routes, inst.demand[b], 21)
        seq = routes_to_sequence([routes])
        tour = torch.cat([torch.zeros(1, 1, dtype=torch.long), seq], 1)
        pkg = float(tour_length(inst.coords[b : b + 1].double(), tour)[0])
        assert length == pytest.approx(pkg, rel=1e-12)
        edges = sum(len(r) + 1 for r in routes)
        assert abs(cost - pkg * SCALE) <= 0.5 * edges + 1e-3  # rounding only
        assert routes_from_actions(seq[0]) == routes


def test_pyvrp_rejects_demands_off_the_capacity_grid():
    coords = torch.rand(4, 2, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="capacity"):
        pyvrp_routes(coords, torch.tensor([0.0, 0.1234, 0.2, 0.3]), capacity=30)


def test_shipped_cvrp20_references_are_feasible_and_measured_in_float64():
    from epb.heuristics import savings
    from epb.policy import DATA

    d = torch.load(DATA / "cvrp20_test.pt", weights_only=True)
    assert d["reference"].startswith("PyVRP")
    inst, ref = load_test_set("cvrp20", 40)
    tours = d["tours"][:40].long()
    for b in range(40):
        check_feasible(routes_from_actions(tours[b]), inst.demand[b], 21)
    closed = torch.cat([torch.zeros(40, 1, dtype=torch.long), tours], 1)
    lengths = tour_length(d["coords"][:40].double(), closed)
    assert torch.allclose(lengths, d["ref"][:40].double(), rtol=1e-12, atol=0)
    # near-optimal: never worse than Clarke-Wright savings on the same instances
    assert (ref <= savings(inst) + 1e-5).all()
