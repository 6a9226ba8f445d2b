r"""Near-exact reference tours from LKH-3 (through the ``elkai`` package, imported lazily) and
the fixed, shipped test sets.

The shipped sets ``data/{tsp20,tsp50,cvrp20}_test.pt`` are made by :func:`make_test_sets`
(``python -m epb.reference``) from fixed seeds, so they are reproducible. TSP references are
LKH-3 tours on the distance matrix scaled to integers (:math:`10^6`), their lengths recomputed in
floating point. For CVRP the reference is the Clarke--Wright savings solution (LKH-3's CVRP mode
is not exposed by ``elkai``), so CVRP "gaps" are relative to savings and may be negative.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import Tensor

from .policy import DATA
from .problems import Instances, random_cvrp, random_tsp, tour_length

SEEDS = {"tsp20": 20_001, "tsp50": 50_001, "cvrp20": 120_001}


def lkh_tour(coords: Tensor, runs: int = 1) -> list[int]:
    """An LKH-3 tour (node order) for one instance ``coords`` ``(n, 2)``."""
    import elkai

    d = torch.cdist(coords.double(), coords.double())
    mat = (d * 1e6).round().long().tolist()
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
            payload = {
                "coords": inst.coords,
                "demand": inst.demand,
                "ref": savings(inst),
                "reference": "Clarke-Wright savings",
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
    a = ap.parse_args(argv)
    make_test_sets({k: a.count for k in SEEDS})


if __name__ == "__main__":
    main()
