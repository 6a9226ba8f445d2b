"""A/B of ``opt.step()``: an older checkout of adaptive_lmo against the current one.

Usage (from the repository root; OLD a folder holding an older ``adaptive_lmo`` package, e.g.
``git archive <commit> packages/adaptive-lmo/src/adaptive_lmo | tar -x -C /tmp/old``)::

    python packages/adaptive-lmo/probes/trim_ab.py a0|auto STEPS \\
        /tmp/old/packages/adaptive-lmo/src/adaptive_lmo

The benchmark's width-256 MLP (``bench_overhead.py``), one thread, each optimizer on its own
copy of the model and of the same batch stream, the order of the two steps alternating;
prints the median per-step ratio new/old after warm-up and whether both models end with the
same bits (issue 33, the a = 0 wiring trim: 0.995 / 0.998 and True; docs/overhead.md).
"""

from __future__ import annotations

import copy
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_overhead as b

from adaptive_lmo import AdaptiveLMO


def load_old(folder: str):
    """The older package under another module name, so both can be imported at once."""
    spec = importlib.util.spec_from_file_location(
        "adaptive_lmo_old", folder + "/__init__.py", submodule_search_locations=[folder]
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["adaptive_lmo_old"] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    mode, steps, folder = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    old = load_old(folder)
    torch.set_num_threads(1)
    exponent = 0.0 if mode == "a0" else "auto"
    base = b.mlp(256, 3, "cpu")
    arms = []
    for cls in (old.AdaptiveLMO, AdaptiveLMO):
        m = copy.deepcopy(base)
        opt = cls(m, lr=b.LR, momentum=b.MOMENTUM, adamw_lr=b.ADAMW_LR, exponent=exponent)
        arms.append((m, opt, b.Batches(256, "cpu", 256)))
    times: list[list[float]] = [[], []]
    for step in range(steps):
        for m, opt, batches in arms:
            x, y = batches()
            opt.zero_grad()
            F.cross_entropy(m(x), y).backward()
        for i in (0, 1) if step % 2 == 0 else (1, 0):
            t = time.perf_counter()
            arms[i][1].step()
            times[i].append(time.perf_counter() - t)
    same = all(
        torch.equal(p, q)
        for p, q in zip(arms[0][0].parameters(), arms[1][0].parameters(), strict=True)
    )
    warm = 151 if mode == "auto" else 20
    a, n = times[0][warm:], times[1][warm:]
    ratio = statistics.median(x / y for x, y in zip(n, a, strict=True))
    print(
        f"{mode}: steps {warm}-{steps}: new/old per-step median {ratio:.3f}, totals "
        f"{sum(n) / sum(a):.3f}, old median {statistics.median(a) * 1e3:.2f} ms, new "
        f"{statistics.median(n) * 1e3:.2f} ms, same bits: {same}"
    )


if __name__ == "__main__":
    main()
