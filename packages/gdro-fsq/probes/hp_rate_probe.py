"""Probe (issue #8): how the two high-probability bounds grow with the rounds.

The synthetic quick instance (m = 10, seed 0, far start), r = 2, one seed per estimator;
prints ``t * bound_hp(0.1) / sqrt(V_t)`` (flat for a sqrt(t) bound) and the bound itself.
Run: ``python probes/hp_rate_probe.py [rounds]`` (about a minute for 16000 rounds).

The README's numbers from this script predate fixes 6 and 7 (centred variance, adaptive
``q`` step, now the default); run today it measures the current default.
"""

import math
import sys

import torch

from gdro_fsq.optim import GDROFSQ
from gdro_fsq.oracle import gdro_optimum, make_grouped_logistic


def main() -> None:
    torch.set_num_threads(1)
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 16000
    m, r = 10, 2
    prob = make_grouped_logistic(m, 5, 40, radius=3.0, noise=0.1, seed=0)
    theta_star, value = gdro_optimum(prob)
    init = -theta_star / theta_star.norm() * prob.radius
    marks = {250 * 4**k for k in range(8)} | {rounds}
    for est in ("iw", "ix"):
        gen = torch.Generator().manual_seed(0)
        w = init.clone().requires_grad_(True)
        opt = GDROFSQ(
            [w],
            prob.loss_fn,
            m,
            radius=prob.radius,
            grad_bound=prob.grad_bound,
            estimator=est,
            generator=gen,
        )
        sampler = prob.sampler(gen)
        for t in range(1, rounds + 1):
            opt.round(sampler, r)
            if t in marks:
                b = opt.bound_hp(0.1)
                gap = prob.max_risk(opt.averaged_params()[0]) - value
                scale = t * b / math.sqrt(opt.game["var_sum"])
                print(
                    f"{est} t={t}: gap {gap:.4f} bound_hp {b:.3f} t*bound_hp/sqrt(V_t) {scale:.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
