"""Per-step timeline of AdaptiveLMO's ``opt.step()`` against torch Muon's, split by kind of step.

A diagnostic, not a library benchmark (the leading underscore keeps it out of ``nox -s bench``;
the ratios to quote come from ``bench_overhead.py``). Both optimizers train copies of the
overhead benchmark's MLP on their own seeded batch streams, alternating step by step (the
order flips every step); every ``opt.step()`` is timed with its kind: a criterion step (the
layer's decomposition or choice), a step with every layer at a = 0, or a step with a layer
off a = 0. It shows where the overhead sits, e.g. the window in which a layer leaves a = 0.

    python packages/adaptive-lmo/benchmarks/_step_timeline.py --steps 500 \\
        --out /tmp/timeline.json
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_overhead import ADAMW_LR, LR, MOMENTUM, Batches, TorchMuonAdamW, mlp

from adaptive_lmo import AdaptiveLMO


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--from-step", type=int, default=151, help="summarise steps after this")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    base = mlp(args.width, 3, "cpu")
    arms = {
        "adaptive": (m := copy.deepcopy(base), AdaptiveLMO(m, lr=LR, momentum=MOMENTUM,
                                                           adamw_lr=ADAMW_LR)),
        "torch_muon": (m2 := copy.deepcopy(base), TorchMuonAdamW(m2)),
    }  # fmt: skip
    batches = {k: Batches(args.width, "cpu", 256) for k in arms}
    opt = arms["adaptive"][1]
    mats = [p for g in opt.param_groups if g["algorithm"] == "lmo" for p in g["params"]]
    rows = []
    for t in range(1, args.steps + 1):
        took = {}
        for name in ("adaptive", "torch_muon") if t % 2 else ("torch_muon", "adaptive"):
            model, o = arms[name]
            x, y = batches[name]()
            o.zero_grad()
            F.cross_entropy(model(x), y).backward()
            t0 = time.perf_counter()
            o.step()
            took[name] = time.perf_counter() - t0
        st = [opt.state[p] for p in mats]
        criterion = any(s.get("last_snap") == t for s in st) or any(
            s.get("source", "").endswith(f"step {t}") for s in st
        )
        exps = [s.get("exponent") for s in st]
        kind = "criterion" if criterion else ("all_a0" if all(e == 0 for e in exps) else "off_a0")
        rows.append({"step": t, **took, "kind": kind, "exponents": exps})
    tail = [r for r in rows if r["step"] >= args.from_step]
    summary = {}
    for kind in ("all", "all_a0", "criterion", "off_a0"):
        sel = [r for r in tail if kind == "all" or r["kind"] == kind]
        if sel:
            a, b = sum(r["adaptive"] for r in sel), sum(r["torch_muon"] for r in sel)
            summary[kind] = {"steps": len(sel), "ratio_of_totals": a / b}
            print(f"{kind}: {len(sel)} steps, ratio of totals {a / b:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
