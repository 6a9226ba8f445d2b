"""Teacher-student with each layer's route fixed: where the default route's gap comes from.

On teacher-student (quick problem) the exact route (``method="svd"``, what the experiments
pin) beats torch Muon and the optimizer's defaults do not (README, Results). This probe
trains both layers together with each layer's polar route and exponent fixed, so no criterion
runs: layer A (whitened inputs, rank-one teacher) and layer B (power-law inputs ``j^-3``) each
at a = 0 by torch Muon's five bfloat16 Newton-Schulz steps (``ns0``: ``method="auto"``) or by
the exact polar factor (``exact0``: ``method="svd"``), and A also at a = 1 (``a1``); torch
Muon itself (``torch.optim.Muon``, Newton-Schulz on both) runs beside them. Same seeds,
problems, initialisations and data order as the experiment, at lr 0.224 (the lr the quick
run selects for torch Muon and for every AdaptiveLMO row), ``backoff=0``; the paired log
ratio of each cell's test MSE against torch Muon's with its 95% Student-t interval.

    python packages/adaptive-lmo/probes/teacher_student_routes.py \\
        --out packages/adaptive-lmo/results/teacher_student_routes_quick.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

import torch
from _teacher_student_run import SCHEDULES, run_to_end

import adaptive_lmo.experiments._common as common
from adaptive_lmo import AdaptiveLMO
from adaptive_lmo.experiments import teacher_student as ts
from shared_core.experiment.seeding import seed_everything

ROUTES = {"ns0": (0.0, "auto"), "exact0": (0.0, "svd"), "a1": (1.0, "svd")}
CELLS = [("ns0", "ns0"), ("ns0", "exact0"), ("exact0", "ns0"), ("exact0", "exact0"),
         ("a1", "ns0"), ("a1", "exact0")]  # fmt: skip


def train(
    cfg: dict, seed: int, lr: float, cell: tuple[str, str] | None, schedule: str = "constant"
) -> float:
    """Test MSE of one seed: ``cell`` = (A's route, B's route), or None for torch Muon;
    ``schedule="cosine"``: the lr decays to 0 over the run (both sides alike)."""
    pb = ts.make_problem(cfg, seed)
    seed_everything(seed)
    model = ts._make_student(cfg, seed)
    if cell is None:
        opt = torch.optim.Muon([model.A.weight, model.B.weight], lr=lr, weight_decay=0.0)
    else:
        groups = []
        for w, route in zip((model.A.weight, model.B.weight), cell, strict=True):
            a, method = ROUTES[route]
            groups.append({"params": [w], "exponent": a, "method": method})
        opt = AdaptiveLMO(groups, lr=lr, momentum=0.95, adjust_lr_fn="original", backoff=0)
    return run_to_end(cfg, pb, seed, model, opt, schedule=schedule)[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lr", type=float, default=0.224)
    ap.add_argument("--full", action="store_true", help="the default-mode problem (8 seeds)")
    ap.add_argument(
        "--schedule",
        choices=SCHEDULES,
        default="constant",
        help="constant lr (the experiment's) or cosine decay to 0 over the run",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = ts.config(quick=not args.full)
    seeds = range(cfg["seeds"])
    muon = [train(cfg, s, args.lr, None, args.schedule) for s in seeds]
    rows = [{"A": "torch Muon", "B": "torch Muon", "per_seed": muon,
             "mean": statistics.fmean(muon)}]  # fmt: skip
    print(f"torch Muon: {statistics.fmean(muon):.4f}")
    for cell in CELLS:
        mse = [train(cfg, s, args.lr, cell, args.schedule) for s in seeds]
        logs = [math.log(a / b) for a, b in zip(mse, muon, strict=True)]
        m, sd = statistics.fmean(logs), statistics.stdev(logs)
        half = common.t_quantile(0.975, len(logs) - 1) * sd / math.sqrt(len(logs))
        rows.append({"A": cell[0], "B": cell[1], "per_seed": mse, "mean": statistics.fmean(mse),
                     "log_ratio_vs_torch_muon": [m, m - half, m + half]})  # fmt: skip
        print(f"A {cell[0]:6s} B {cell[1]:6s}: {statistics.fmean(mse):.4f}  vs torch Muon "
              f"{m:+.4f} [{m - half:+.4f}, {m + half:+.4f}]", flush=True)  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"lr": args.lr, "schedule": args.schedule,
                       "mode": "full" if args.full else "quick", "rows": rows},
                      f, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
