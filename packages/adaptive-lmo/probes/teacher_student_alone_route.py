"""Teacher-student's layer A alone on the default route: which rule costs what (issue 33).

Phase 1 of ``teacher-student`` (quick problem, layer B frozen at the teacher) trains layer A
alone with ``exponent="auto"``. On the exact route (``method="svd"``, what the experiments
pin) it reaches the fixed exponents' level; on the default route it does not. This probe
runs that training (4 seeds, lr 0.1: the exact route's best lr of the experiment's grid) on
one route and with the default route's rules switched off (or, ``keep-unresolved``, an
accepted mixture kept on its point gain) one at a time, and records the
test MSE and, on every mixture step, the realised direction's relative error against the
exact family member of the same direction (float64 SVD).

    python packages/adaptive-lmo/probes/teacher_student_alone_route.py \\
        [--variant exact|default|no-mixture|no-cost|no-mixture-no-cost|keep-unresolved] \\
        [--mixture-steps 3,4,5] \\
        [--out f.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import adaptive_lmo.controller as controller
import adaptive_lmo.experiments._common as common
import adaptive_lmo.optim as optim_mod
from adaptive_lmo.experiments import teacher_student as ts
from adaptive_lmo.fractional import fractional_update

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _teacher_student_default_route import _keep_unresolved as keep_unresolved

VARIANTS = (
    "exact",
    "default",
    "no-mixture",
    "no-cost",
    "no-mixture-no-cost",
    "keep-unresolved",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", choices=VARIANTS, default="default")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument(
        "--mixture-steps", default=None, help="candidate step counts, e.g. 3,4,5 (default: 5)"
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    method = "svd" if args.variant == "exact" else "auto"
    if args.variant.startswith("no-mixture"):
        controller.mixture_loss = lambda *a, steps=5, **k: (torch.zeros(steps + 1), math.inf)
    if args.variant in ("no-cost", "no-mixture-no-cost"):
        controller.ExponentController._cost_rule = lambda self, *a: ""
    if args.mixture_steps:
        controller.MIXTURE_STEPS = tuple(int(k) for k in args.mixture_steps.split(","))
    if args.variant == "keep-unresolved":
        keep_unresolved()  # the benchmark script's (one definition)
    errors: list[float] = []
    mixed = optim_mod.mixed_member

    def logged(P, w, a, scale, fro=None):
        D = mixed(P, w, a, scale, fro)
        exact = fractional_update(P.double(), a, method="svd", scale=scale)
        errors.append(float((D.double() - exact).norm() / exact.norm()))
        return D

    optim_mod.mixed_member = logged
    base = common.AdaptiveLMO

    class Routed(base):
        def __init__(self, *a, **kw) -> None:
            kw["method"] = method
            super().__init__(*a, **kw)

    common.AdaptiveLMO = Routed
    cfg = ts.config(True)
    rows = []
    for seed in range(args.seeds):
        pb = ts.make_problem(cfg, seed)
        model = ts._make_student(cfg, seed)
        with torch.no_grad():
            model.B.weight.copy_(pb["TB"])
        model.B.weight.requires_grad_(False)
        errors.clear()

        def evaluate(m, pb=pb):
            return tuple(float(F.mse_loss(m(pb[s][0]), pb[s][1])) for s in ("val", "test"))

        out = common.train_loop(
            model, "AdaptiveLMO", args.lr, seed, pb["train"], F.mse_loss, evaluate,
            steps=cfg["steps"], batch=cfg["batch"], head=None, exponent="auto",
        )  # fmt: skip
        row = {
            "seed": seed,
            "test_mse": out.test,
            "exponents_A": out.exponents.get("A.weight", []),
            "steps_on_mixture": len(errors),
            "mixture_error_median": statistics.median(errors) if errors else None,
            "mixture_error_max": max(errors) if errors else None,
        }
        rows.append(row)
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
               if k != "exponents_A"})  # fmt: skip
    mean = statistics.fmean(r["test_mse"] for r in rows)
    print(f"{args.variant}: layer A alone, lr {args.lr}, mean test MSE {mean:.4f}")
    if args.out:
        with open(args.out, "w") as f:
            steps = list(controller.MIXTURE_STEPS)
            json.dump(
                {"variant": args.variant, "mixture_steps": steps, "lr": args.lr, "mean": mean,
                 "rows": rows},
                f,
            )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
