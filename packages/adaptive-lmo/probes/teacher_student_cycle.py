"""Why teacher-student's layer A cycles 0 -> ~0.3 -> ~0.85 -> 0 (issue 33; docs/cycle.md).

Runs the setting of ``tests/test_gain_bound.py`` (quick problem, lr 0.224, momentum 0.95,
``update_every=10``) with ``method="svd"`` and ``backoff=0`` (the cost rule inert: the
criterion's own choices) for 200 steps, and at every criterion step of layer A records:

- ``a``: the choice; ``a_input_only``: the criterion with ``B = I`` (for MSE the Gauss-Newton
  output factor is the identity, so this is the true-curvature answer);
- ``B_11_over_mean``: the output factor's diagonal along the direction's top left singular
  vector over its mean (a spike there damps the top direction, i.e. pushes a to 0);
- ``s1_share``: the top singular value's share of the direction's energy;
- ``signal_along``: A's residual along the teacher's rank-one direction, ``u^T (T_A - W_A) v
  / ||T_A||`` (its sign shows the heavy-ball overshoot), ``signal_resid`` its full norm.

``--fisher`` calls ``opt.fisher_backward(out, "mse")`` each step (sampled-target Fisher).

    python packages/adaptive-lmo/probes/teacher_student_cycle.py [--fisher] [--seed 0] \\
        [--out f.json]
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn

from adaptive_lmo import AdaptiveLMO
from adaptive_lmo.controller import ExponentController
from adaptive_lmo.criterion import choose_exponent
from adaptive_lmo.experiments.teacher_student import TwoTower, config, make_problem


def run(seed: int, fisher: bool, steps: int = 200) -> list[dict]:
    rec: list[dict] = []
    orig = ExponentController._choose_exponent

    def wrapped(self, it):
        orig(self, it)
        if self._names[id(it["p"])] != "A.weight" or it.get("b") is None:
            return
        s, d = it["crit"]
        c, b = it["c"], it["b"]
        tb = torch.diagonal(b)
        rec.append(
            {
                "step": self.state[it["p"]]["step"],
                "a": self.state[it["p"]]["exponent"],
                "a_input_only": choose_exponent(s, torch.diagonal(c).clone(), d),
                "B_11_over_mean": float(tb[0] / tb.mean()),
                "s1_share": float(s[0] ** 2 / (s**2).sum()),
            }
        )

    ExponentController._choose_exponent = wrapped
    try:
        cfg = config(quick=True)
        pb = make_problem(cfg, seed)
        torch.manual_seed(1000 + seed)
        model = TwoTower(cfg["na"], cfg["nb"], cfg["m"])
        opt = AdaptiveLMO(
            model, lr=0.224, momentum=0.95, update_every=10, head=None, method="svd", backoff=0
        )
        X, Y = pb["train"]
        TA = pb["TA"]
        Ut, St, Vt = torch.linalg.svd(TA)
        gen = torch.Generator().manual_seed(seed)
        for t in range(1, steps + 1):
            idx = torch.randint(0, X.shape[0], (cfg["batch"],), generator=gen)
            opt.zero_grad()
            out = model(X[idx])
            if fisher:
                opt.fisher_backward(out, "mse")
            loss = nn.functional.mse_loss(out, Y[idx])
            loss.backward()
            R = TA - model.A.weight.detach()
            opt.step()
            if rec and rec[-1]["step"] == t and "loss" not in rec[-1]:
                rec[-1].update(
                    loss=float(loss.detach()),
                    signal_along=float(Ut[:, 0] @ R @ Vt[0] / St[0]),
                    signal_resid=float(R.norm() / TA.norm()),
                )
    finally:
        ExponentController._choose_exponent = orig
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fisher", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rec = run(args.seed, args.fisher)
    for r in rec:
        print(
            " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items())
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {"seed": args.seed, "fisher": args.fisher, "criterion_steps": rec}, f, indent=1
            )


if __name__ == "__main__":
    main()
