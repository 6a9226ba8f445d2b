"""Where AdaptiveLMO's CPU overhead over its a = 0 corner comes from (exploratory probe).

Times 20 training steps of the ``bench_overhead`` MLP (256 wide, 3 hidden layers, batch 256,
1 thread) for a = 0 and for "auto" with ``update_every`` 10 and 1000, same-batch statistics and
input-only curvature; prints each median over 6 interleaved repetitions relative to a = 0.
``update_every=1000`` runs no criterion step after the first, so it isolates the per-step cost
(hooks, bookkeeping) from the cost of the criterion steps.

    OMP_NUM_THREADS=1 python packages/adaptive-lmo/probes/overhead_split.py
"""

from __future__ import annotations

import copy
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from adaptive_lmo import AdaptiveLMO

CONFIGS = {
    "a=0": {"exponent": 0.0},
    "auto, update_every=10": {"exponent": "auto", "update_every": 10},
    "auto, update_every=1000": {"exponent": "auto", "update_every": 1000},
    "auto, update_every=10, same-batch": {
        "exponent": "auto",
        "update_every": 10,
        "stats": "same_batch",
    },
    "auto, update_every=10, input curvature": {
        "exponent": "auto",
        "update_every": 10,
        "curvature": "input",
    },
}


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(3):
        layers += [nn.Linear(256, 256), nn.GELU()]
    base = nn.Sequential(*layers, nn.Linear(256, 10))
    runs = {}
    for name, kw in CONFIGS.items():
        model = copy.deepcopy(base)
        # fresh random batches, one equal stream per config: a fixed batch is memorised and its
        # underflowing gradients skip the criterion (benchmarks/bench_overhead.py, Batches)
        gen = torch.Generator().manual_seed(0)
        runs[name] = (model, AdaptiveLMO(model, lr=0.02, **kw), gen)

    def train(model: nn.Module, opt: AdaptiveLMO, gen: torch.Generator, n: int = 20) -> None:
        for _ in range(n):
            x = torch.randn(256, 256, generator=gen)
            y = torch.randint(0, 10, (256,), generator=gen)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()

    for run in runs.values():
        train(*run, 5)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(6):
        for name, run in runs.items():
            t = time.perf_counter()
            train(*run)
            times[name].append(time.perf_counter() - t)
    ref = statistics.median(times["a=0"])
    for name, ts in times.items():
        print(f"{name}: {statistics.median(ts) / ref:.3f} x a=0")


if __name__ == "__main__":
    main()
