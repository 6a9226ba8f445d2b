"""How much the exact-polar rule's estimate moves, against its own row-sampling error.

``exact_polar=True`` scores, at each criterion step of a layer at a = 0, the exact polar
factor against torch Muon's Newton-Schulz spectrum with the surrogate; a layer whose
Newton-Schulz loss reaches ``min_gain`` takes an SVD per step until its next criterion step.
On the overhead benchmark's MLP (``benchmarks/bench_overhead.py``: width 256, random labels,
defaults otherwise, 1 thread) this trains 700 steps with the rule on, with the lower 0.975
bound (the default ``switch_confidence``) or the point estimate (``--confidence 0``), and
records at every criterion step each layer's loss estimate, its lower bound and the flag,
and the share of layer-steps that took the SVD.

    python packages/adaptive-lmo/probes/exact_polar_swings.py [--confidence 0] [--out f.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from adaptive_lmo import AdaptiveLMO

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_overhead import ADAMW_LR, LR, MOMENTUM, Batches, mlp


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--confidence", type=float, default=0.975)
    ap.add_argument("--steps", type=int, default=700)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    model = mlp(256, 3, "cpu")
    opt = AdaptiveLMO(model, lr=LR, momentum=MOMENTUM, adamw_lr=ADAMW_LR, exact_polar=True,
                      switch_confidence=args.confidence)  # fmt: skip
    batches = Batches(256, "cpu", 256)
    mats = [p for g in opt.param_groups if g["algorithm"] == "lmo" for p in g["params"]]
    events, seen, flagged = [], {}, 0
    for t in range(1, args.steps + 1):
        x, y = batches()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        for i, p in enumerate(mats):
            st = opt.state[p]
            key = (st.get("ns_loss"), st.get("last_snap"))
            if "ns_loss" in st and seen.get(i) != key:
                seen[i] = key
                events.append({"step": t, "layer": i, "loss": st["ns_loss"],
                               "bound": st["ns_loss_bound"], "exact": st["exact_a0"]})  # fmt: skip
                svd = "  -> SVD" if st["exact_a0"] else ""
                print(f"step {t} layer {i}: Newton-Schulz loses {st['ns_loss']:+.3f}, bound "
                      f"{st['ns_loss_bound']:+.3f}{svd}")  # fmt: skip
            flagged += bool(st.get("exact_a0"))
    share = flagged / (args.steps * len(mats))
    print(f"layer-steps on the SVD: {share:.1%}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"confidence": args.confidence, "steps": args.steps,
                       "svd_share": share, "events": events}, f, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
