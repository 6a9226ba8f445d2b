"""Where the steady-state opt.step() overhead over torch.optim.Muon sits (issue 33).

The ``bench_overhead`` candidate (defaults) and torch Muon + AdamW, width 256, 1 thread,
trained side by side (alternating step by step) for 311 steps; every ``opt.step()`` from step
151 on is timed. Splits the candidate's extra time into steps that decomposed a direction
or chose an exponent (criterion steps: the SVD and the criterion's work) and all others
(the wiring), per 80-step window.

    python packages/adaptive-lmo/probes/steady_step_split.py
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from adaptive_lmo import AdaptiveLMO

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_overhead import ADAMW_LR, LR, MOMENTUM, Batches, TorchMuonAdamW, mlp


def main() -> None:
    torch.set_num_threads(1)
    base = mlp(256, 3, "cpu")
    m1, m2 = copy.deepcopy(base), copy.deepcopy(base)
    cand = AdaptiveLMO(m1, lr=LR, momentum=MOMENTUM, adamw_lr=ADAMW_LR)
    ref = TorchMuonAdamW(m2)
    b1, b2 = Batches(256, "cpu", 256), Batches(256, "cpu", 256)
    tc, tr, crit = [], [], []
    for t in range(1, 312):
        for model, opt, b, acc in ((m1, cand, b1, tc), (m2, ref, b2, tr)):
            x, y = b()
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            s = time.perf_counter()
            opt.step()
            dt = time.perf_counter() - s
            if t > 150:
                acc.append(dt)
            if opt is cand and t > 150:
                # a criterion step: some layer decomposed its direction (snap) or chose from it
                st = [cand.state[p] for p in (m1[0].weight, m1[2].weight, m1[4].weight)]
                crit.append(
                    any(
                        q.get("last_snap") == q["step"] or q["step"] - 1 == q.get("last_snap")
                        for q in st
                    )
                )
    extra = [c - r for c, r in zip(tc, tr, strict=True)]
    on = [e for e, k in zip(extra, crit, strict=True) if k]
    off = [e for e, k in zip(extra, crit, strict=True) if not k]
    ms = 1e3
    print(
        f"torch Muon step median {ms * statistics.median(tr):.2f} ms; "
        f"candidate {ms * statistics.median(tc):.2f} ms"
    )
    print(
        f"steps 151-311: {len(on)} criterion steps (snap or choice) add "
        f"{ms * sum(on):.1f} ms in total, {len(off)} other steps add {ms * sum(off):.1f} ms "
        f"(median {ms * statistics.median(off):.3f} ms each)"
    )
    print(
        f"total candidate / torch Muon: {sum(tc) / sum(tr):.3f}x; without the criterion "
        f"steps' extra: {(sum(tc) - sum(on)) / sum(tr):.3f}x"
    )


if __name__ == "__main__":
    main()
