"""The exact GDRO optimum, and the rate at which the averaged iterate's gap to it shrinks."""

import math

import pytest
import torch

from gdro_fsq.optim import GDROFSQ
from gdro_fsq.oracle import gdro_optimum, make_grouped_logistic, smoothed_max_optimum

# tolerances here follow an error model; `nox -s numerics` reruns them on every BLAS path
pytestmark = pytest.mark.numerics


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


def _gaps_and_bounds(ts, instances, seeds, r=2):
    """Seed- and instance-averaged gap of the averaged iterate at the rounds ``ts`` (m = 5)."""
    gaps = torch.zeros(len(ts))
    ok_bound = True
    for inst in range(instances):
        prob = make_grouped_logistic(5, 4, 30, radius=3.0, noise=0.1, seed=inst)
        _, value = gdro_optimum(prob)
        for seed in range(seeds):
            gen = torch.Generator().manual_seed(seed)
            w = torch.zeros(prob.dim, requires_grad=True)
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
                opt.round(sampler, r)
                if t == ts[k]:
                    gap = prob.max_risk(opt.averaged_params()[0]) - value
                    ok_bound = ok_bound and gap <= opt.bound()  # the tracked bound
                    gaps[k] += gap / (instances * seeds)
                    k += 1
    return gaps, ok_bound


def test_gap_of_averaged_iterate_falls_and_stays_below_the_bound():
    gaps, ok_bound = _gaps_and_bounds((100, 2000), instances=4, seeds=1)
    assert ok_bound
    assert bool((gaps > 0).all())
    assert float(gaps[1]) < 0.75 * float(gaps[0]), gaps  # the bound falls by sqrt(20) ~ 4.5


@pytest.mark.slow
def test_gap_of_averaged_iterate_shrinks_at_the_bound_rate():
    # constant r: the bound is (1/t) sqrt(t (m/r) log m) ~ t^(-1/2). Single instances have
    # plateaus while q is still spread out, so the gap is averaged over 4 problems x 2 seeds.
    ts = (100, 300, 1000, 3000, 10000)
    gaps, ok_bound = _gaps_and_bounds(ts, instances=4, seeds=2)
    assert ok_bound
    slope = _slope(ts, gaps.tolist())
    assert -0.7 <= slope <= -0.3, (slope, gaps)


@pytest.mark.parametrize("seed", [0, 5])
def test_conic_oracle_agrees_with_slsqp(seed):
    pytest.importorskip("cvxpy")
    from gdro_fsq.oracle import gdro_optimum_cvxpy

    prob = make_grouped_logistic(6, 5, 23, radius=2.5, noise=0.3, seed=seed)
    theta_a, value_a = gdro_optimum(prob)
    theta_b, value_b = gdro_optimum_cvxpy(prob)
    assert value_b == pytest.approx(value_a, abs=1e-6)
    assert float(theta_b.norm()) <= prob.radius + 1e-12
    # the worst-group risk is strictly convex here, so the minimisers agree too
    torch.testing.assert_close(theta_b, theta_a, atol=1e-3, rtol=0)
