"""A prototype: each layer's route chosen by its decrease at the step the optimizer takes.

``probes/teacher_student_step_length.py`` found that the criterion's surrogate, which scores
a direction at its best step length, misranks teacher-student's routes on layer A when the
constant lr overshoots late in training. This probe replaces the criterion's choice (and
nothing else) with a score at the **taken** step, from the optimizer's own statistics on
each criterion step, and trains teacher-student with it.

For a direction :math:`D_w = U\\,\\mathrm{diag}(w)\\,V^\\top` in the scored direction's
singular basis and the step :math:`\\eta` = lr times torch Muon's shape factor, the quadratic
model's decrease is

.. math::  \\Delta_\\eta(w) = \\eta\\,\\tilde d^\\top w - \\tfrac{\\eta^2}{2}\\, h\\, w^\\top M w,

- :math:`\\tilde d_i = u_i^\\top g\\,v_i` with :math:`g` the **next batch's** gradient (with
  ``stats="next_batch"`` the choice runs one step after the decomposition, so this gradient
  did not build the direction: no self-alignment),
- :math:`M = (U^\\top\\hat BU)\\circ(V^\\top\\hat\\Sigma V)` the K-FAC curvature from the sampled
  Fisher's rows (``fisher_backward(out, "mse")``, unit-variance draws) and the input rows,
- :math:`h = 2/m` the per-row Hessian of ``F.mse_loss`` (mean over the ``m`` outputs and the
  rows) against the unit draws: the absolute scale the step-free surrogate never needs.

Candidates: torch Muon's Newton-Schulz map (:func:`adaptive_lmo.fractional.ns_spectrum`),
the exact polar factor (ones) and the members :math:`s^a` at ``scale="polar"`` on a 33-point
grid. The best one sets the layer's route until its next criterion step (Newton-Schulz:
a = 0 on the default route; exact: a = 0 with the exact factor; a member: its exponent by
SVD). No cost rule, no switch test, ``backoff=0``: a test of the score, not of a default.

Rule, stated before the run: at the constant lr 0.224 (the experiment's selected lr), quick
problem, 4 seeds, the prototype **beats torch Muon** when the paired log ratio's 95% upper
bound is below 0, and **matches the best fixed-route cell** (A Newton-Schulz, B exact) when
its mean test MSE is within 0.5% of that cell's.

    python packages/adaptive-lmo/probes/teacher_student_step_aware.py \\
        --out packages/adaptive-lmo/results/teacher_student_step_aware_quick.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

import torch
from _teacher_student_run import SCHEDULES, run_to_end

import adaptive_lmo.controller as controller
import adaptive_lmo.experiments._common as common
from adaptive_lmo import AdaptiveLMO
from adaptive_lmo.criterion import alignment
from adaptive_lmo.experiments import teacher_student as ts
from adaptive_lmo.fractional import ns_spectrum
from adaptive_lmo.options import adjust_lr_factor
from shared_core.experiment.seeding import seed_everything

GRID = [i / 32 for i in range(33)]


def taken_step_scores(s, U, Vh, grad, b, c, eta: float, h: float) -> dict[str, float]:
    """:math:`\\Delta_\\eta` of every candidate (float64; ``grad`` in the matrix view)."""
    s64 = s.to(torch.float64)
    d = alignment(U.to(torch.float64), Vh.to(torch.float64), grad.to(torch.float64))
    M = (b.to(torch.float64) * c.to(torch.float64)) * h
    r = s64.shape[-1]
    cands = {"newton_schulz": ns_spectrum(s64), "exact": torch.ones_like(s64)}
    top = s64 / s64.max()
    for a in GRID[1:]:
        w = top.pow(a)
        cands[f"{a:.5f}"] = w * math.sqrt(r) / torch.linalg.vector_norm(w)
    return {k: float(eta * (d * w).sum() - 0.5 * eta**2 * (w @ M @ w)) for k, w in cands.items()}


def install(log: dict) -> None:
    """Replace the controller's choice with the taken-step score (this process only)."""

    def choose(self, it) -> None:
        st, g, crit = self.state[it.p], it.group, it.crit
        if crit is None or crit.b is None or crit.c is None or crit.U is None:
            self._choose_exponent(it, crit)  # no sampled rows yet: the usual rule
            st["exact_a0"] = False
            return
        eta = g["lr"] * adjust_lr_factor(g["adjust_lr_fn"], it.shape)
        m = it.shape[-2]
        scores = taken_step_scores(
            crit.s, crit.U, crit.Vh, it.p.grad.reshape(it.shape), crit.b, crit.c, eta, 2.0 / m
        )
        best = max(scores, key=scores.get)
        if best in ("newton_schulz", "exact"):
            st["exponent"], st["exact_a0"] = 0.0, best == "exact"
        else:
            st["exponent"], st["exact_a0"] = float(best), False
        st["source"] = f"taken-step score: {best}"
        st["stable"] = 0
        if "last_snap" in st:
            st["next_snap"] = st["last_snap"] + self._interval(st, g)
        log.setdefault(self._names[id(it.p)], []).append(best)

    controller.ExponentController._choose = choose


def train(cfg: dict, seed: int, lr: float, schedule: str, prototype: bool, log: dict) -> float:
    pb = ts.make_problem(cfg, seed)
    seed_everything(seed)
    model = ts._make_student(cfg, seed)
    if prototype:
        opt = AdaptiveLMO(model, lr=lr, momentum=0.95, adjust_lr_fn="original", head=None,
                          backoff=0)  # fmt: skip
    else:
        opt = torch.optim.Muon([model.A.weight, model.B.weight], lr=lr, weight_decay=0.0)
    fisher = "mse" if prototype else None
    return run_to_end(cfg, pb, seed, model, opt, fisher=fisher, schedule=schedule)[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lr", type=float, default=0.224)
    ap.add_argument("--schedule", choices=SCHEDULES, default="constant")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = ts.config(quick=True)
    seeds = range(cfg["seeds"])
    muon = [train(cfg, s, args.lr, args.schedule, False, {}) for s in seeds]
    log: dict = {}
    install(log)
    proto = [train(cfg, s, args.lr, args.schedule, True, log) for s in seeds]
    logs = [math.log(a / b) for a, b in zip(proto, muon, strict=True)]
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = common.t_quantile(0.975, len(logs) - 1) * sd / math.sqrt(len(logs))
    share = {
        layer: {k: picks.count(k) / len(picks) for k in sorted(set(picks))}
        for layer, picks in log.items()
    }
    ci = f"{mean:+.4f} [{mean - half:+.4f}, {mean + half:+.4f}]"
    print(f"torch Muon {statistics.fmean(muon):.4f}; "
          f"taken-step prototype {statistics.fmean(proto):.4f}: {ci}")  # fmt: skip
    for layer, sh in share.items():
        top = sorted(sh.items(), key=lambda kv: -kv[1])[:4]
        print(f"  {layer}: " + ", ".join(f"{k} {v:.0%}" for k, v in top))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"lr": args.lr, "schedule": args.schedule, "torch_muon": muon,
                       "prototype": proto, "log_ratio": [mean, mean - half, mean + half],
                       "route_shares": share}, f, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
