"""Probe (issue #8, third round): which non-increasing step cap to pair with the round weights.

Usage: ``python probes/cap_rule_probe.py [seeds [schedule]]`` (schedule: ``random``, the
default, or a constant size ``1``, ``2``, ``half``). The random schedule ``r ~ U[1, m]`` of the
experiments (``RandomSize(1, m, m, seed=m)``), N = ``PROBE_BUDGET`` (default 6000) samples, on
the digits (``real``) and the synthetic instances m = 10, 20, 50; three cap rules:
``min r`` (``step_cap="min"``: the cap of the smallest size so far, no down-weighting; the
previous default), ``mean r`` (``"mean"``: the cap of the running mean size, the smaller
rounds down-weighted; the default) and ``none`` (``"none"``: no history cap; every round
with r < 2 m eta down-weighted). Prints the mean +-
standard error of the gap and the mean round weight C_t / t.
"""

import math
import os
import statistics
import sys

import torch

from gdro_fsq.experiments.synthetic import run_method
from gdro_fsq.optim import GDROFSQ
from gdro_fsq.oracle import gdro_optimum, make_grouped_logistic
from gdro_fsq.schedules import ConstantSize, RandomSize


def main() -> None:
    torch.set_num_threads(1)
    n_seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    # "random" (default) or a constant size: "1", "2", "half"
    sched = sys.argv[2] if len(sys.argv) > 2 else "random"
    budget = int(os.environ.get("PROBE_BUDGET", "6000"))
    cases = []
    from gdro_fsq.experiments.real import load_digits_parity

    prob, _ = load_digits_parity(0)
    cases.append(("real", prob, gdro_optimum(prob)[1], torch.zeros(prob.dim, dtype=torch.float64)))
    for m in (10, 20, 50):
        p = make_grouped_logistic(m, 5, 40, radius=3.0, noise=0.1, seed=0)
        th, v = gdro_optimum(p)
        cases.append((f"synthetic m={m}", p, v, -th / th.norm() * p.radius))
    for label, prob, value, init in cases:
        m = prob.n_groups
        for name, rule in (("min r", "min"), ("mean r", "mean"), ("none", "none")):
            gaps, ws = [], []
            hold = {}

            def make(p, gen, rule=rule, prob=prob, hold=hold, m=m):
                hold["o"] = GDROFSQ(
                    p,
                    prob.loss_fn,
                    m,
                    radius=prob.radius,
                    grad_bound=prob.grad_bound,
                    step_cap=rule,
                    generator=gen,
                )
                return hold["o"]

            if sched == "random":
                schedule = RandomSize(1, m, m, seed=m)
            else:
                schedule = ConstantSize(m // 2 if sched == "half" else int(sched), m)
            for s in range(n_seeds):
                res = run_method(prob, value, make, schedule, budget, init, s)
                gaps.append(res["gap"][-1])
                ws.append(hold["o"].weight_sum / hold["o"].t)
            se = statistics.stdev(gaps) / math.sqrt(len(gaps))
            print(
                f"{label} N={budget} r {sched} cap {name}: {statistics.mean(gaps):.4f} +- {se:.4f}"
                f" C/t {statistics.mean(ws):.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
