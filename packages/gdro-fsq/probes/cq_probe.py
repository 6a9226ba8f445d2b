"""Probe (issue #8): the bound-optimal q-step constant c_q against the default.

The synthetic quick instance, m = 10, N = 6000 samples, seeds 0 and 1, the experiment's far
start. Run: ``python probes/cq_probe.py`` (about a minute on one core).

The README's numbers from this script predate fixes 6 and 7 (centred variance, adaptive
``q`` step, now the default); run today it measures the current default.
"""

import math
import time
from functools import partial

import torch

from gdro_fsq.experiments.synthetic import run_method
from gdro_fsq.optim import GDROFSQ, OneSampleBandit, SMDFullInfo
from gdro_fsq.oracle import gdro_optimum, make_grouped_logistic
from gdro_fsq.schedules import ConstantSize


def main() -> None:
    torch.set_num_threads(1)
    m, budget = 10, 6000
    prob = make_grouped_logistic(m, 5, 40, radius=3.0, noise=0.1, seed=0)
    theta_star, value = gdro_optimum(prob)
    init = -theta_star / theta_star.norm() * prob.radius
    f, d, g = prob.loss_fn, prob.radius, prob.grad_bound

    def fsq(cls, cq, p, gen):
        return cls(p, f, m, radius=d, grad_bound=g, lr_q=cq, generator=gen)

    def smd(cq, p, gen):
        return SMDFullInfo(p, f, m, lr_theta=math.sqrt(2) * d / g, lr_q=cq, radius=d, generator=gen)

    for cq in (1 / math.sqrt(2), 1.0):
        methods = {
            "FSQ r=2": (partial(fsq, GDROFSQ, cq), 2),
            "FSQ r=5": (partial(fsq, GDROFSQ, cq), 5),
            "1-sample": (partial(fsq, OneSampleBandit, cq), 1),
            "SMD": (partial(smd, cq), m),
        }
        for name, (make, r) in methods.items():
            t0 = time.time()
            sched = ConstantSize(r, m)
            runs = [run_method(prob, value, make, sched, budget, init, s) for s in (0, 1)]
            gaps = [res["gap"][-1] for res in runs]
            print(f"c_q={cq:.3f} {name}: {sum(gaps) / 2:.4f} ({time.time() - t0:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
