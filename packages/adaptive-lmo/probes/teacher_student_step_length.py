"""Why the one-step surrogate misranks teacher-student's routes on layer A: the step length.

The criterion's surrogate scores a direction ``D`` by its decrease at the **best** step along
it, :math:`\\Delta^* = \\langle G, D\\rangle^2 / (2 D^\\top H D)`, so no route pays for a
step longer than the curvature allows. The optimizer takes a **fixed** step, ``lr`` times
torch Muon's shape factor, whatever the route: the exact polar factor's Frobenius norm is
``sqrt(r)``, Newton-Schulz's is smaller (its small singular values stay below 1).

This probe trains teacher-student (quick problem) on the best fixed-route cell of
``probes/teacher_student_routes.py`` (A on torch Muon's Newton-Schulz, B on the exact polar
factor, ``backoff=0``, lr 0.224, the experiment's seeds, data order and initialisations) and,
every ``--every`` steps, for each layer and each route (Newton-Schulz, the exact polar factor,
the members a = 1 and a = 0.5 at ``scale="polar"``) built from the direction that step uses
(the Nesterov momentum), computes the change of the **full training loss** (all 4096 rows,
no surrogate, only that layer moved) exactly: the model is linear in each layer, so the loss
along ``-t D`` is a parabola fitted exactly from three evaluations. Reported per route: the
decrease at the optimizer's step (``t = 1``, in units of ``lr`` times the shape factor), the
decrease at the best step, and the best ``t``.

    python packages/adaptive-lmo/probes/teacher_student_step_length.py \\
        --out packages/adaptive-lmo/results/teacher_student_step_length_quick.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F

import adaptive_lmo.experiments._common as common
from adaptive_lmo import AdaptiveLMO
from adaptive_lmo.experiments import teacher_student as ts
from adaptive_lmo.fractional import lmo_direction
from adaptive_lmo.options import adjust_lr_factor
from shared_core.experiment.seeding import seed_everything

LR, MU = 0.224, 0.95


def _route(a: float, method: str):
    """The optimizer's own direction for exponent ``a`` (``scale="polar"``): ``method="auto"``
    at a = 0 is torch Muon's bf16 Newton-Schulz, ``"svd"`` the exact member."""

    def direction(P: torch.Tensor) -> torch.Tensor:
        return lmo_direction(P, a, method=method, check_finite=False)[0].to(torch.float32)

    return direction


ROUTES = {
    "newton_schulz": _route(0.0, "auto"),
    "exact": _route(0.0, "svd"),
    "a=0.5": _route(0.5, "svd"),
    "a=1": _route(1.0, "svd"),
}


def _parabola(model, W: torch.Tensor, D: torch.Tensor, eta: float, X, Y) -> dict[str, float]:
    """Loss along ``W - t * eta * D``: decrease at t = 1, best decrease, best t."""
    W0 = W.clone()
    L = []
    for t in (0.0, 1.0, 2.0):
        W.copy_(W0 - t * eta * D)
        L.append(float(F.mse_loss(model(X), Y)))
    W.copy_(W0)
    # L(t) = L0 - g t + h t^2 / 2 (exact: the loss is quadratic in one linear layer)
    h = L[2] - 2.0 * L[1] + L[0]
    g = (3.0 * L[0] - 4.0 * L[1] + L[2]) / 2.0
    best = g * g / (2.0 * h) if h > 0 else math.inf
    return {"at_step": L[0] - L[1], "best": best, "best_t": g / h if h > 0 else math.inf}


def run(cfg: dict, seed: int, every: int) -> dict:
    pb = ts.make_problem(cfg, seed)
    seed_everything(seed)
    model = ts._make_student(cfg, seed)
    layers = {"A": model.A.weight, "B": model.B.weight}
    groups = [
        {"params": [layers["A"]], "exponent": 0.0, "method": "auto"},
        {"params": [layers["B"]], "exponent": 0.0, "method": "svd"},
    ]
    opt = AdaptiveLMO(groups, lr=LR, momentum=MU, adjust_lr_fn="original", backoff=0)
    X, Y = pb["train"]
    rows = []
    for t, idx in enumerate(common.batch_indices(X.shape[0], cfg["batch"], cfg["steps"], seed)):
        opt.zero_grad()
        F.mse_loss(model(X[idx]), Y[idx]).backward()
        if t % every == 0:
            with torch.no_grad():
                rec: dict = {"step": t}
                for name, W in layers.items():
                    buf = opt.state[W].get("momentum_buffer")
                    g = W.grad
                    # the Nesterov direction this step will use (torch Muon's first step: buf = g)
                    nb = g.clone() if buf is None else buf * MU + g
                    P = g + MU * nb
                    eta = LR * adjust_lr_factor("original", tuple(W.shape))
                    rec[name] = {r: _parabola(model, W, f(P), eta, X, Y) for r, f in ROUTES.items()}
                rows.append(rec)
        opt.step()
    with torch.no_grad():
        test = float(F.mse_loss(model(pb["test"][0]), pb["test"][1]))
    return {"seed": seed, "test_mse": test, "rows": rows}


def _summary(runs: list[dict], layer: str, late: int) -> dict:
    """Share of probe points (from step ``late`` on) where Newton-Schulz beats the exact
    factor, at the optimizer's step and at the best step; median best t per route."""
    pts = [r[layer] for run in runs for r in run["rows"] if r["step"] >= late]
    ns_wins = [p["newton_schulz"]["at_step"] > p["exact"]["at_step"] for p in pts]
    ns_wins_best = [p["newton_schulz"]["best"] > p["exact"]["best"] for p in pts]

    def mean(key: str) -> dict[str, float]:
        return {k: statistics.fmean(p[k][key] for p in pts) for k in ROUTES}

    return {
        "points": len(pts),
        "ns_beats_exact_at_step": sum(ns_wins) / len(pts),
        "ns_beats_exact_at_best_step": sum(ns_wins_best) / len(pts),
        "median_best_t": {k: statistics.median(p[k]["best_t"] for p in pts) for k in ROUTES},
        "mean_decrease_at_step": mean("at_step"),
        "mean_decrease_at_best_step": mean("best"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--late", type=int, default=100, help="summary from this step on")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = ts.config(quick=True)
    runs = [run(cfg, s, args.every) for s in range(cfg["seeds"])]
    out = {"lr": LR, "every": args.every, "late": args.late, "runs": runs, "summary": {}}
    for layer in ("A", "B"):
        for label, late in (("all", 0), ("late", args.late)):
            sm = _summary(runs, layer, late)
            out["summary"][f"{layer}_{label}"] = sm
            print(f"layer {layer}, {label} ({sm['points']} points): Newton-Schulz beats exact "
                  f"at the step {sm['ns_beats_exact_at_step']:.0%}, at the best step "
                  f"{sm['ns_beats_exact_at_best_step']:.0%}; median best t "
                  + ", ".join(f"{k} {v:.2f}" for k, v in sm["median_best_t"].items()))  # fmt: skip
            print("   mean decrease at the step: " + ", ".join(
                f"{k} {v:+.5f}" for k, v in sm["mean_decrease_at_step"].items()))  # fmt: skip
            print("   at the best step: " + ", ".join(
                f"{k} {v:.5f}" for k, v in sm["mean_decrease_at_best_step"].items()))  # fmt: skip
    print("test MSE per seed: " + ", ".join(f"{r['test_mse']:.4f}" for r in runs))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
