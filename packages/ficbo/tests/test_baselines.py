"""GP baselines from BoTorch as policies (the ``baselines`` extra)."""

import math

import pytest
import torch

pytest.importorskip("botorch")

from ficbo.baselines import (
    feedback_inputs,
    fit_batched_gp,
    gp_ei_policy,
    gp_feedback_policy,
    gp_ts_policy,
    joint_draw,
)
from ficbo.optimize import run
from ficbo.prior import evaluate, sample_tasks


def test_batched_gp_posterior_equals_per_task_gps_with_its_hyperparameters():
    # Route 1: one batched fit over 3 tasks; route 2: three separate SingleTaskGPs given the
    # batched model's fitted hyperparameters of their task. Same posterior up to round-off.
    from botorch.models import SingleTaskGP

    g = torch.Generator().manual_seed(0)
    x = torch.rand(3, 7, 2, generator=g, dtype=torch.float64)
    y = torch.sin(6 * x.sum(-1)) + 0.1 * torch.randn(3, 7, generator=g, dtype=torch.float64)
    xq = torch.rand(3, 11, 2, generator=g, dtype=torch.float64)
    model = fit_batched_gp(x, y)
    post = model.posterior(xq)
    state = model.state_dict()
    for i in range(3):
        single = SingleTaskGP(x[i], y[i][:, None])
        single.load_state_dict(
            {k: (v[i] if v.dim() and v.shape[0] == 3 else v) for k, v in state.items()}
        )
        single.eval()
        ref = single.posterior(xq[i])
        assert torch.allclose(post.mean[i], ref.mean, atol=1e-9)
        assert torch.allclose(post.mvn.covariance_matrix[i], ref.mvn.covariance_matrix, atol=1e-9)
    # the three tasks' hyperparameters were fitted separately (they differ)
    ls = model.covar_module.lengthscale
    assert not torch.allclose(ls[0], ls[1])


def test_joint_draw_has_the_posterior_covariance_monte_carlo():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(1, 4, 4, generator=g, dtype=torch.float64)
    cov = a @ a.transpose(-1, -2)
    cov[..., 3, :] = cov[..., 2, :]  # rank-deficient (two equal points): still a valid draw
    cov[..., :, 3] = cov[..., :, 2]
    mean = torch.randn(1, 4, generator=g, dtype=torch.float64)
    n = 40_000
    g = torch.Generator().manual_seed(2)
    draws = joint_draw(mean.expand(n, -1), cov.expand(n, -1, -1), g)
    emp = torch.cov(draws.T)
    # sd of a sample covariance entry: sqrt((S_ii S_jj + S_ij^2) / n); 5 sd
    diag = torch.diagonal(cov[0])
    sd = torch.sqrt((diag[:, None] * diag[None, :] + cov[0] ** 2) / n)
    assert (emp - cov[0]).abs().le(5 * sd).all()
    assert (draws.mean(0) - mean[0]).abs().le(5 * torch.sqrt(diag / n)).all()
    # equal points draw equal values (eigenvalue round-off ~ 1e-16 x scale)
    dev = draws - mean
    assert torch.allclose(dev[:, 3], dev[:, 2], atol=1e-6 * diag.max().sqrt())


def test_feedback_inputs_scale_to_unit_interval_and_mark_missing():
    fb = torch.tensor([[[2.0, 4.0, math.nan, 3.0], [1.0, 1.0, 1.0, 1.0]]], dtype=torch.float64)
    inp = feedback_inputs(fb)
    # source 0: min-max scaled, NaN -> median of the scaled scored values, availability column
    assert inp.shape == (1, 4, 3)
    assert torch.allclose(inp[0, :, 0], torch.tensor([0.0, 1.0, 0.5, 0.5], dtype=torch.float64))
    assert inp[0, :, 2].tolist() == [1.0, 1.0, 0.0, 1.0]
    # a constant source stays finite (0 after scaling)
    assert torch.isfinite(inp).all() and (inp[0, :, 1] == 0).all()
    assert feedback_inputs(fb[..., [0, 1, 3]]).shape == (1, 3, 2)  # no NaN: no extra column


def _smooth_tasks(b=2, rho=1.0):
    g = torch.Generator().manual_seed(0)
    tasks = sample_tasks(b, 1, 1, generator=g, lengthscale=0.3, rho=rho, noise=0.0, access=1.0)
    x = torch.linspace(0, 1, 15, dtype=torch.float64)[None, :, None].expand(b, -1, -1).clone()
    f, fb = evaluate(tasks, x, generator=g)
    return x, f, fb


@pytest.mark.slow
@pytest.mark.parametrize("make", [gp_ei_policy, gp_ts_policy])
def test_gp_policies_find_the_max_of_a_smooth_1d_task_and_never_repeat(make):
    x, f, fb = _smooth_tasks()
    res = run(x, f, fb, make(), n_iter=8, n_init=2, seed=0)
    assert all(len(set(q.tolist())) == 10 for q in res.queries)
    # 10 of 15 grid points chosen by a GP on a smooth function: the max is among them
    # (random choice would miss it with probability 1/3 per task).
    assert torch.allclose(res.simple_regret[:, -1], torch.zeros(2, dtype=torch.float64))


@pytest.mark.slow
def test_gp_feedback_without_sources_is_gp_ei_and_finds_the_max_with_a_perfect_source():
    x, f, fb = _smooth_tasks(b=3)
    # no source: the same inputs, so the same queries as GP-EI
    a = run(x, f, fb[:, :0], gp_feedback_policy(), n_iter=3, n_init=2, seed=0)
    b = run(x, f, fb[:, :0], gp_ei_policy(), n_iter=3, n_init=2, seed=0)
    assert torch.equal(a.queries, b.queries)
    # rho = 1, no noise: the feedback is a monotone warp of f; with the budget of the GP-EI
    # test (10 of 15 grid points) the max is found on every task
    res = run(x, f, fb, gp_feedback_policy(), n_iter=8, n_init=2, seed=0)
    assert all(len(set(q.tolist())) == 10 for q in res.queries)
    assert torch.allclose(res.simple_regret[:, -1], torch.zeros(3, dtype=torch.float64))
