"""Teacher-student under a cosine lr schedule: the optimizer's defaults against torch Muon.

The registered experiment trains at a constant lr picked from a coarse grid (0.05, 0.224, 1),
and at its selected lr every route overshoots late in training (the loss along a step is
lowest at about half of it, ``probes/teacher_student_step_length.py``), which favours routes
with a smaller step over those the one-step criterion prefers. This probe asks the question
again with a schedule a user would run: the lr decays to 0 by a cosine over the run
(``torch.optim.lr_scheduler.CosineAnnealingLR``, both sides alike), on the quick problem
(the experiment's seeds, problems, initialisations and data order).

Rule, fixed before the run: lr grid ``--lrs`` (default 1, 2, 4: the fixed-route cells of
``teacher_student_routes.py --schedule cosine`` were all best at 2 of 0.224-4), each
configuration's lr selected on mean validation MSE over the seeds (the experiment's rule);
a configuration **beats torch Muon** when the 95% Student-t upper bound of the paired per-seed
log ratio of test MSE (each at its selected lr) is below 0.

Configurations: torch Muon; AdaptiveLMO on the experiments' exact route (``method="svd"``,
``backoff=0``); the optimizer's defaults; the defaults with ``opt.fisher_backward(out, "mse")``
each step.

    python packages/adaptive-lmo/probes/teacher_student_schedule.py \\
        --out packages/adaptive-lmo/results/teacher_student_schedule_quick.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

import torch
from _teacher_student_run import run_to_end

import adaptive_lmo.experiments._common as common
from adaptive_lmo import AdaptiveLMO
from adaptive_lmo.experiments import teacher_student as ts
from shared_core.experiment.seeding import seed_everything

CONFIGS = ("torch Muon", "exact route", "defaults", "defaults + fisher_backward")


def _optimizer(name: str, model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    mats = [model.A.weight, model.B.weight]
    if name == "torch Muon":
        return torch.optim.Muon(mats, lr=lr, weight_decay=0.0)
    # what the experiments also set: momentum 0.95, torch Muon's lr shape, no head (both
    # layers take the matrix update)
    kw = {"lr": lr, "momentum": 0.95, "adjust_lr_fn": "original", "head": None}
    if name == "exact route":  # the experiments' pins (experiments/_common.py)
        return AdaptiveLMO(model, method="svd", backoff=0, **kw)
    return AdaptiveLMO(model, **kw)


def train(cfg: dict, name: str, lr: float, seed: int) -> dict:
    pb = ts.make_problem(cfg, seed)
    seed_everything(seed)
    model = ts._make_student(cfg, seed)
    opt = _optimizer(name, model, lr)
    exps: dict[str, list[float]] = {"A": [], "B": []}

    def record() -> None:
        if isinstance(opt, AdaptiveLMO):
            for k, w in (("A", model.A.weight), ("B", model.B.weight)):
                exps[k].append(float(opt.state[w].get("exponent", 0.0)))

    fisher = "mse" if name.endswith("fisher_backward") else None
    val, test = run_to_end(cfg, pb, seed, model, opt, fisher=fisher, schedule="cosine",
                           on_step=record)  # fmt: skip
    mean_exp = {k: statistics.fmean(v) for k, v in exps.items() if v}
    return {"val": val, "test": test, "mean_exponent": mean_exp}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lrs", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    ap.add_argument("--full", action="store_true", help="the default-mode problem (8 seeds)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = ts.config(quick=not args.full)
    seeds = list(range(cfg["seeds"]))
    runs = {n: {lr: [train(cfg, n, lr, s) for s in seeds] for lr in args.lrs} for n in CONFIGS}
    chosen = {
        n: min(args.lrs, key=lambda lr, n=n: statistics.fmean(r["val"] for r in runs[n][lr]))
        for n in CONFIGS
    }
    ref = [r["test"] for r in runs["torch Muon"][chosen["torch Muon"]]]
    report = {}
    for n in CONFIGS:
        rs = runs[n][chosen[n]]
        test = [r["test"] for r in rs]
        row = {"lr": chosen[n], "test_mean": statistics.fmean(test), "per_seed": test}
        exps = [r["mean_exponent"] for r in rs if r["mean_exponent"]]
        if exps:
            row["mean_exponent"] = {k: statistics.fmean(e[k] for e in exps) for k in ("A", "B")}
        if n != "torch Muon":
            logs = [math.log(a / b) for a, b in zip(test, ref, strict=True)]
            m, sd = statistics.fmean(logs), statistics.stdev(logs)
            half = common.t_quantile(0.975, len(logs) - 1) * sd / math.sqrt(len(logs))
            row["log_ratio_vs_torch_muon"] = [m, m - half, m + half]
            row["beats_torch_muon"] = m + half < 0
        report[n] = row
        extra = ""
        if "log_ratio_vs_torch_muon" in row:
            m, lo, hi = row["log_ratio_vs_torch_muon"]
            extra = f"  {m:+.4f} [{lo:+.4f}, {hi:+.4f}] beats: {row['beats_torch_muon']}"
        if "mean_exponent" in row:
            me = row["mean_exponent"]
            extra += "  mean a: " + ", ".join(f"{k} {v:.2f}" for k, v in me.items())
        print(f"{n:28s} lr {chosen[n]:g}: test {row['test_mean']:.4f}{extra}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"schedule": "cosine", "lrs": args.lrs, "mode": "full" if args.full
                       else "quick", "report": report,
                       "runs": {n: {str(lr): v for lr, v in r.items()} for n, r in runs.items()}},
                      f, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
