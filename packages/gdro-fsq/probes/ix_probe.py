"""Probe (issue #8): implicit exploration (estimator="ix") against the default ("iw").

The synthetic quick instance (m = 10 or 20, N = 6000 samples, seeds 0 and 1, the experiment's
far start); prints the final gap, the in-expectation bound and the high-probability bounds.
Run: ``python probes/ix_probe.py [m]`` (about a minute per m on one core).

The README's numbers from this script predate fixes 6 and 7 (centred variance, adaptive
``q`` step, now the default); run today it measures the current default.
"""

import sys
import time
from functools import partial

import torch

from gdro_fsq.experiments.synthetic import run_method
from gdro_fsq.optim import GDROFSQ
from gdro_fsq.oracle import gdro_optimum, make_grouped_logistic
from gdro_fsq.schedules import ConstantSize, RandomSize


def main() -> None:
    torch.set_num_threads(1)
    m = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    budget = 6000
    prob = make_grouped_logistic(m, 5, 40, radius=3.0, noise=0.1, seed=0)
    theta_star, value = gdro_optimum(prob)
    init = -theta_star / theta_star.norm() * prob.radius
    f, d, g = prob.loss_fn, prob.radius, prob.grad_bound

    def fsq(est, p, gen):
        return GDROFSQ(p, f, m, radius=d, grad_bound=g, estimator=est, generator=gen)

    scheds = {
        "r=1": ConstantSize(1, m),
        "r=2": ConstantSize(2, m),
        f"r={m // 2}": ConstantSize(m // 2, m),
        f"r={m}": ConstantSize(m, m),
        "r~U": RandomSize(1, m, m, seed=m),
    }
    for name, sched in scheds.items():
        for est in ("iw", "ix"):
            t0 = time.time()
            runs = [
                run_method(prob, value, partial(fsq, est), sched, budget, init, s) for s in (0, 1)
            ]
            mean = {k: sum(r[k][-1] for r in runs) / 2 for k in ("gap", "bound", "bound_hp")}
            print(
                f"m={m} {name} {est}: gap {mean['gap']:.4f} bound {mean['bound']:.3f} "
                f"bound_hp {mean['bound_hp']:.3f} ({time.time() - t0:.0f}s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
