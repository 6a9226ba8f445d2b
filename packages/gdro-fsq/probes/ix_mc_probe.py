"""Probe (issue #8): the numbers behind the slow Monte-Carlo test of the ix bound.

The setting of ``tests/test_ix.py::test_monte_carlo_failure_rate_at_most_delta`` (m = 5, r = 2,
150 rounds, 30 seeds, delta = 0.1, exact optimum from SLSQP); prints, over the seeds, the
largest ratios gap / bound_hp, player 2's true regret / its part of the bound, and the
per-group underestimation / its Ville bound. Run: ``python probes/ix_mc_probe.py`` (~1 min).
"""

import math

import torch

from gdro_fsq.optim import GDROFSQ, fsq_bound_hp_ix, ix_grid
from gdro_fsq.oracle import gdro_optimum, make_grouped_logistic


def main() -> None:
    torch.set_num_threads(1)
    prob = make_grouped_logistic(5, 4, 30, radius=3.0, noise=0.1, seed=0)
    _, value = gdro_optimum(prob)
    delta, seeds, rounds, m = 0.1, 30, 150, 5
    big = math.log(4 * m * 240 / delta)
    r_gap, r_q, r_dev = [], [], []
    for seed in range(seeds):
        gen = torch.Generator().manual_seed(seed)
        w = torch.zeros(prob.dim, dtype=torch.float64, requires_grad=True)
        opt = GDROFSQ(
            [w],
            prob.loss_fn,
            m,
            radius=prob.radius,
            grad_bound=prob.grad_bound,
            estimator="ix",
            generator=gen,
        )
        sampler = prob.sampler(gen)
        dev = torch.zeros(m, dtype=torch.float64)
        regret = torch.zeros(m, dtype=torch.float64)
        for _ in range(rounds):
            risks = prob.group_risks(w.detach())
            before = opt.game["est_sum"].clone()
            query = opt.plan(2)
            regret += risks - float((opt.q * risks).sum())
            batch = sampler.sample(query.groups)
            opt.step(lambda b=batch, w=w: prob.loss_fn([w], b))
            dev += opt.game["est_sum"] - before - (1 - risks)
        gap = prob.max_risk(opt.averaged_params()[0]) - value
        g = opt.game
        q_part = rounds * fsq_bound_hp_ix(
            rounds,
            delta,
            m,
            kappa_sq_sum=g["kappa_sq_sum"],
            noise_sq_sum=0.0,
            reg_radius=0.0,
            radius=0.0,
            grad_bound=0.0,
            lr_theta=1.0,
            loss_bound=1.0,
            eta_q=opt.round_weights.eta,
            second_moment_sum=g["second_moment_sum"],
            bias_sum=g["bias_sum"],
            gamma_min=g["gamma_min"],
            full_rounds=g["full_rounds"],
        )
        dev_bound = min(big / x for x in ix_grid() if x <= 2 * g["gamma_min"])
        r_gap.append(gap / opt.bound_hp(delta))
        r_q.append(float(regret.max()) / q_part)
        r_dev.append(float(dev.max()) / dev_bound)
    print(f"gap / bound_hp: max {max(r_gap):.3f}, mean {sum(r_gap) / seeds:.3f}")
    print(f"player-2 regret / its bound: max {max(r_q):.3f}, mean {sum(r_q) / seeds:.3f}")
    print(f"underestimation (c) / its bound: max {max(r_dev):.3f}, mean {sum(r_dev) / seeds:.3f}")


if __name__ == "__main__":
    main()
