"""What the criterion's surrogate says about teacher-student's routes at its criterion steps.

Teacher-student quick, one seed, the default route with ``backoff=0`` and the sampled Fisher
(``opt.fisher_backward(out, "mse")`` each step), lr 0.224. At every criterion step of each
layer, the surrogate's one-step decrease (the criterion's own statistics) of four spectra in
the direction's singular basis, relative to the exact polar factor's (all ones): torch Muon's
Newton-Schulz map (:func:`adaptive_lmo.fractional.ns_spectrum`), the members a = 1 and
a = 0.5. Compare with the end-to-end test MSE of each route fixed
(``probes/teacher_student_routes.py``).

    python packages/adaptive-lmo/probes/teacher_student_surrogate_routes.py [--seed 0]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import adaptive_lmo.controller as controller
import adaptive_lmo.experiments._common as common
from adaptive_lmo import AdaptiveLMO
from adaptive_lmo.criterion import weighted_decrease
from adaptive_lmo.experiments import teacher_student as ts
from adaptive_lmo.fractional import ns_spectrum
from shared_core.experiment.seeding import seed_everything


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = ts.config(quick=True)
    names: dict[int, str] = {}
    choose = controller.ExponentController._choose

    def scored(self, it):
        choose(self, it)
        crit = it.crit
        if crit is None or crit.curv is None:
            return
        s = crit.s.to(torch.float64)
        top = s / s.max()
        W = torch.stack([torch.ones_like(s), ns_spectrum(s), top, top.sqrt()])
        dec = weighted_decrease(W, crit.s, crit.curv, crit.d)
        rel = [float(v) for v in dec[1:] / dec[0]]
        print(f"{names[id(it.p)]} step {self.state[it.p]['step']:3d}: chose a = "
              f"{self.state[it.p]['exponent']:.2f}; decrease over the exact polar factor's: "
              f"Newton-Schulz {rel[0]:.3f}, a = 1 {rel[1]:.3f}, a = 0.5 {rel[2]:.3f}")  # fmt: skip

    controller.ExponentController._choose = scored
    pb = ts.make_problem(cfg, args.seed)
    seed_everything(args.seed)
    model = ts._make_student(cfg, args.seed)
    names.update({id(model.A.weight): "A", id(model.B.weight): "B"})
    opt = AdaptiveLMO(model, lr=0.224, momentum=0.95, adjust_lr_fn="original",
                      adamw_lr=common.ADAMW_SIDE_LR, head=None, backoff=0)  # fmt: skip
    X, Y = pb["train"]
    for idx in common.batch_indices(X.shape[0], cfg["batch"], cfg["steps"], args.seed):
        opt.zero_grad()
        out = model(X[idx])
        opt.fisher_backward(out, "mse")
        F.mse_loss(out, Y[idx]).backward()
        opt.step()
    controller.ExponentController._choose = choose
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
