"""A/B of the fixed-rank step: this checkout's IMuon vs an older copy, and each vs Muon.

The three steps (new IMuon, old IMuon, torch.optim.Muon) run in one process, interleaved in a
rotating order, warm (no garbage collection between calls, unlike ``shared_core.bench``), one
thread; ratios are of process CPU time, pair by pair (median [min, max]). The old copy is a
``src/imuon`` folder of an earlier commit, imported under the name ``imuon_old``:

    mkdir -p /tmp/old && git archive HEAD packages/imuon/src/imuon | tar -x -C /tmp/old
    ln -sfn /tmp/old/packages/imuon/src/imuon /tmp/old/imuon_old
    python packages/imuon/benchmarks/_ab_before_after.py --old-root /tmp/old --ranks 8,64

(Leading underscore: not part of ``nox -s bench``, it needs the old copy.)
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics as st
import sys
import time

import torch


def _param(t):
    p = torch.nn.Parameter(t.clone())
    p.grad = torch.randn_like(t) * 0.01
    return p


def _ratio(cpu: dict[str, list[float]], x: str, y: str) -> str:
    v = sorted(p / q for p, q in zip(cpu[x], cpu[y], strict=True))
    return f"{st.median(v):.3f} [{v[0]:.2f}, {v[-1]:.2f}]"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old-root", required=True, help="folder holding the package imuon_old")
    ap.add_argument("--ranks", default="8,64")
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args(argv)
    sys.path.insert(0, args.old_root)
    imuon = importlib.import_module("imuon")
    imuon_old = importlib.import_module("imuon_old")
    torch.set_num_threads(1)
    for r in (int(x) for x in args.ranks.split(",")):
        torch.manual_seed(0)
        a, b = torch.randn(args.size, r), torch.randn(args.size, r)
        group = {"manifold": "fixed_rank"}
        steps = {
            "new": imuon.IMuon([{**group, "params": [_param(a), _param(b)]}], lr=0.01).step,
            "old": imuon_old.IMuon([{**group, "params": [_param(a), _param(b)]}], lr=0.01).step,
            "muon": torch.optim.Muon([_param(a), _param(b)], lr=0.01).step,
        }
        names = list(steps)
        for _ in range(3):
            for f in steps.values():
                f()
        cpu: dict[str, list[float]] = {k: [] for k in names}
        for i in range(args.repeats):
            for k in names[i % 3 :] + names[: i % 3]:
                t0 = time.process_time()
                steps[k]()
                cpu[k].append(time.process_time() - t0)

        med = {k: st.median(v) * 1e3 for k, v in cpu.items()}
        print(
            f"{args.size}x{args.size} r={r}: new/Muon {_ratio(cpu, 'new', 'muon')}, "
            f"old/Muon {_ratio(cpu, 'old', 'muon')}, new/old {_ratio(cpu, 'new', 'old')}; "
            f"median ms new {med['new']:.2f} old {med['old']:.2f} Muon {med['muon']:.2f}; "
            f"load {os.getloadavg()[0]:.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
