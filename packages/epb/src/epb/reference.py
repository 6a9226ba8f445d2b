r"""Near-exact reference tours from LKH-3 (through the ``elkai`` package, imported lazily) and
the fixed, shipped test sets.

The shipped sets ``data/{tsp20,tsp50,cvrp20}_test.pt`` are made by :func:`make_test_sets`
(``python -m epb.reference``) from fixed seeds, so they are reproducible. TSP references are
LKH-3 tours on the distance matrix scaled to integers (:math:`10^6`), their lengths recomputed in
floating point. CVRP references come from PyVRP (imported lazily; its 0.14 solver is an
iterated local search, the successor of its hybrid genetic search) with a fixed iteration budget
and seed, so they are reproducible: distances are scaled by :data:`SCALE` and rounded to integers
for the solver, demands are the integer demand units, and the returned routes are re-measured in
float64 with :func:`epb.localsearch.solution_length`; the solver's integer cost must agree with
that length to within the rounding (half a unit per edge) or the call raises.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .policy import DATA
from .problems import Instances, cvrp_capacity, random_cvrp, random_tsp, tour_length

SEEDS = {"tsp20": 20_001, "tsp50": 50_001, "cvrp20": 120_001}
SCALE = 1_000_000  # integer distance units per unit of length handed to LKH-3 and PyVRP
PYVRP_ITERATIONS = 5000  # fixed budget: results do not depend on the machine's speed
PYVRP_SEED = 0


def lkh_tour(coords: Tensor, runs: int = 1) -> list[int]:
    """An LKH-3 tour (node order) for one instance ``coords`` ``(n, 2)``."""
    import elkai

    d = torch.cdist(coords.double(), coords.double())
    mat = (d * SCALE).round().long().tolist()
    tour = elkai.DistanceMatrix(mat).solve_tsp(runs=runs)
    return tour[:-1] if len(tour) > len(mat) else tour


def lkh_lengths(inst: Instances, runs: int = 1, progress=None) -> tuple[Tensor, Tensor]:
    """LKH-3 tours ``(B, n)`` and their lengths ``(B,)`` for a TSP batch."""
    tours = []
    for b in range(inst.size):
        tours.append(lkh_tour(inst.coords[b], runs))
        if progress is not None:
            progress(b)
    t = torch.tensor(tours, dtype=torch.long)
    return t, tour_length(inst.coords.double(), t).float()


def _demand_units(demand: np.ndarray, capacity: float) -> np.ndarray:
    units = demand * capacity
    q = np.rint(units).astype(np.int64)
    if np.abs(units - q).max() > 1e-4:
        raise ValueError("demands are not integer multiples of 1/capacity; pass `capacity`")
    return q


def pyvrp_routes(
    coords: Tensor,
    demand: Tensor,
    capacity: float | None = None,
    iterations: int = PYVRP_ITERATIONS,
    seed: int = PYVRP_SEED,
) -> tuple[list[list[int]], float, int]:
    """PyVRP routes (lists of customer node indices, depot 0 left out), their float64 length and
    the solver's own integer cost (in units of ``1 / SCALE``) for one CVRP instance (``coords``
    ``(n, 2)``, ``demand`` ``(n,)`` as fractions of ``capacity``; by default the capacity
    :func:`random_cvrp` uses for ``n - 1`` customers)."""
    from pyvrp import Model, PenaltyParams, SolveParams
    from pyvrp.stop import MaxIterations

    from .localsearch import solution_length

    n = coords.shape[0]
    cap = round(cvrp_capacity(n - 1) if capacity is None else capacity)
    c = coords.double()
    d = torch.cdist(c, c).numpy()
    dist = np.rint(d * SCALE).astype(np.int64)
    q = _demand_units(demand.double().numpy(), cap)
    m = Model()
    locs = [m.add_location(x=float(c[i, 0]), y=float(c[i, 1])) for i in range(n)]
    m.add_depot(locs[0])
    m.add_vehicle_type(num_available=n - 1, capacity=cap)
    for i in range(1, n):
        m.add_client(locs[i], delivery=int(q[i]))
    for i in range(n):
        for j in range(n):
            if i != j:
                m.add_edge(locs[i], locs[j], distance=int(dist[i, j]))
    # distances are ~1e6 per unit length while loads are a few units: allow load penalties large
    # enough to matter against that scale (the default cap leaves infeasible solutions cheap)
    params = SolveParams(penalty=PenaltyParams(max_penalty=float(SCALE) * 100))
    res = m.solve(MaxIterations(iterations), seed=seed, display=False, params=params)
    if not res.is_feasible():
        raise RuntimeError("PyVRP found no feasible solution")
    # client activities are numbered 0.. among clients; node = index + 1 (one depot, node 0)
    routes = [[a.idx + 1 for a in r if a.is_client()] for r in res.best.routes()]
    routes = [r for r in routes if r]
    length = solution_length(routes, d)
    edges = sum(len(r) + 1 for r in routes)
    if abs(res.cost() - length * SCALE) > 0.5 * edges + 1e-3:
        raise RuntimeError(f"PyVRP cost {res.cost()} != recomputed length {length * SCALE}")
    return routes, length, int(res.cost())


def pyvrp_reference(
    inst: Instances, iterations: int = PYVRP_ITERATIONS, seed: int = PYVRP_SEED, progress=None
) -> tuple[list[list[list[int]]], Tensor]:
    """PyVRP routes of every instance of a CVRP batch and their float64 lengths ``(B,)``."""
    sols, lengths = [], []
    for b in range(inst.size):
        r, length, _ = pyvrp_routes(inst.coords[b], inst.demand[b], None, iterations, seed)
        sols.append(r)
        lengths.append(length)
        if progress is not None:
            progress(b)
    return sols, torch.tensor(lengths, dtype=torch.float64)


def routes_to_sequence(solutions: list[list[list[int]]]) -> Tensor:
    """Solutions as node sequences ``(B, L)`` (each route followed by a depot visit 0, padded
    with zeros; :func:`epb.localsearch.routes_from_actions` inverts it)."""
    seqs = [[v for r in sol for v in (*r, 0)] for sol in solutions]
    width = max(len(s) for s in seqs)
    return torch.tensor([s + [0] * (width - len(s)) for s in seqs], dtype=torch.long)


def make_test_sets(sizes: dict[str, int] | None = None, out: Path = DATA) -> None:
    """Generate and save the fixed test sets with their reference lengths."""
    from .heuristics import savings

    sizes = sizes or {"tsp20": 1000, "tsp50": 1000, "cvrp20": 1000}
    for name, count in sizes.items():
        gen = torch.Generator().manual_seed(SEEDS[name])
        if name.startswith("tsp"):
            inst = random_tsp(count, int(name[3:]), gen)
            tours, lengths = lkh_lengths(inst)
            payload = {
                "coords": inst.coords,
                "tours": tours.short(),
                "ref": lengths,
                "reference": "LKH-3 via elkai (runs=1)",
            }
        else:
            inst = random_cvrp(count, int(name[4:]), gen)
            from importlib.metadata import version

            sols, lengths = pyvrp_reference(inst)
            payload = {
                "coords": inst.coords,
                "demand": inst.demand,
                "tours": routes_to_sequence(sols).short(),
                "ref": lengths,
                "savings": savings(inst),
                "reference": (
                    f"PyVRP {version('pyvrp')} (MaxIterations({PYVRP_ITERATIONS}), "
                    f"seed {PYVRP_SEED}, distances x{SCALE} rounded)"
                ),
            }
        torch.save(payload, out / f"{name}_test.pt")
        print(name, count, float(payload["ref"].mean()), flush=True)


def load_test_set(name: str, limit: int | None = None) -> tuple[Instances, Tensor]:
    """The shipped test set ``name`` (``tsp20``, ``tsp50``, ``cvrp20``): instances and
    reference lengths, the first ``limit`` of them."""
    path = DATA / f"{name}_test.pt"
    if not path.exists():
        raise FileNotFoundError(f"{path.name} missing: run `python -m epb.reference`")
    d = torch.load(path, weights_only=True)
    sl = slice(0, limit)
    inst = Instances(d["coords"][sl].float(), None if "demand" not in d else d["demand"][sl])
    return inst, d["ref"][sl].float()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="generate the shipped test sets")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--only", choices=sorted(SEEDS), nargs="*", help="sets to regenerate")
    a = ap.parse_args(argv)
    make_test_sets({k: a.count for k in (a.only or SEEDS)})


if __name__ == "__main__":
    main()
