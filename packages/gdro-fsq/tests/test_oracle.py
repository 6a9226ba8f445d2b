"""The exact GDRO optimum, and the rate at which the averaged iterate's gap to it shrinks."""

import math

import pytest
import torch

from gdro_fsq.optim import GDROFSQ
from gdro_fsq.oracle import gdro_optimum, make_grouped_logistic, smoothed_max_optimum


@pytest.fixture(scope="module")
def problem():
    prob = make_grouped_logistic(5, 4, 30, radius=3.0, noise=0.1, seed=0)
    return prob, *gdro_optimum(prob)


def test_losses_are_scaled_into_unit_interval(problem):
    prob, _, _ = problem
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        th = torch.randn(prob.dim, generator=gen)
        th = th / th.norm() * prob.radius
        losses = prob.per_sample_loss(th, prob.X, prob.y)
        assert float(losses.min()) >= 0 and float(losses.max()) <= 1


def test_optimum_against_feasible_points_and_a_smoothed_solver(problem):
    prob, theta, value = problem
    assert float(theta.norm()) <= prob.radius + 1e-9
    gen = torch.Generator().manual_seed(1)
    for _ in range(200):
        th = torch.randn(prob.dim, generator=gen)
        th = th / th.norm() * prob.radius * float(torch.rand((), generator=gen))
        assert prob.max_risk(th) >= value - 1e-9
    beta = 400.0
    smooth = smoothed_max_optimum(prob, beta, steps=400)
    # OPT <= max risk at the smoothed minimiser <= OPT + log(m) / beta
    assert value - 1e-9 <= smooth <= value + math.log(prob.n_groups) / beta
    # at the optimum the worst groups are tied (it is not one group's minimiser)
    risks = prob.group_risks(theta)
    assert int((risks >= value - 1e-6).sum()) >= 2


def _slope(ts, gaps):
    lt = torch.log(torch.tensor(ts, dtype=torch.float64))
    lg = torch.log(torch.tensor(gaps))
    return float(((lt - lt.mean()) * (lg - lg.mean())).sum() / ((lt - lt.mean()) ** 2).sum())


def test_gap_of_averaged_iterate_shrinks_at_the_bound_rate(problem):
    prob, theta_star, value = problem
    ts = (100, 300, 1000, 3000)
    init = -theta_star / theta_star.norm() * prob.radius  # start far from the optimum
    gaps, bounds = torch.zeros(len(ts)), torch.zeros(len(ts))
    seeds = 3
    for seed in range(seeds):
        gen = torch.Generator().manual_seed(seed)
        w = init.clone().requires_grad_(True)
        opt = GDROFSQ(
            [w],
            prob.loss_fn,
            prob.n_groups,
            radius=prob.radius,
            grad_bound=prob.grad_bound,
            generator=gen,
        )
        sampler = prob.sampler(gen)
        k = 0
        for t in range(1, ts[-1] + 1):
            opt.round(sampler, 2)
            if t == ts[k]:
                gaps[k] += (prob.max_risk(opt.averaged_params()[0]) - value) / seeds
                bounds[k] = opt.bound()
                k += 1
    assert bool((gaps > 0).all())
    assert bool((gaps <= bounds).all()), (gaps, bounds)  # the in-expectation bound
    # constant r: the bound is (1/t) sqrt(t (m/r) log m) ~ t^(-1/2)
    slope = _slope(ts, gaps.tolist())
    assert -0.7 <= slope <= -0.3, slope
