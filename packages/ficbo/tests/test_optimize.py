"""Acquisitions, policies and the optimisation loop."""

import math

import pytest
import torch
from scipy import integrate, stats

from ficbo.model import FICBOModel, ModelConfig
from ficbo.optimize import (
    blind_feedback_policy,
    expected_improvement,
    model_policy,
    random_policy,
    run,
    select,
)
from ficbo.prior import evaluate, sample_tasks


@pytest.mark.parametrize(("mu", "sd", "best"), [(0.3, 0.7, 0.1), (-1.0, 0.2, 0.5), (2.0, 3.0, 2.0)])
def test_ei_closed_form_matches_quadrature(mu, sd, best):
    # EI = E[max(Y - best, 0)], Y ~ N(mu, sd^2), by numerical integration (independent route).
    ref, _ = integrate.quad(
        lambda y: (y - best) * stats.norm.pdf(y, mu, sd), best, mu + 12 * sd, epsabs=1e-13
    )
    got = expected_improvement(
        torch.tensor([mu], dtype=torch.float64),
        torch.tensor([sd], dtype=torch.float64),
        torch.tensor(best, dtype=torch.float64),
    )
    assert float(got) == pytest.approx(ref, rel=1e-8, abs=1e-12)


def test_select_picks_the_max_unqueried_score():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(6, 11, generator=g, dtype=torch.float64)
    queried = torch.rand(6, 11, generator=g) < 0.4
    queried[:, 0] = False
    idx = select(scores, queried)
    for b in range(6):
        free = [j for j in range(11) if not queried[b, j]]
        assert int(idx[b]) == max(free, key=lambda j: float(scores[b, j]))
    with pytest.raises(ValueError, match="no unqueried"):
        select(scores, torch.ones_like(queried))


def _pool(n_tasks=8, n=20, rho=0.9, seed=0):
    g = torch.Generator().manual_seed(seed)
    tasks = sample_tasks(n_tasks, 2, 1, generator=g, rho=rho, noise=0.0, warp_param=0.0)
    x = torch.rand(n_tasks, n, 2, generator=g, dtype=torch.float64)
    f, fb = evaluate(tasks, x, generator=g)
    return x, f, fb


def test_run_never_repeats_and_regret_is_consistent():
    x, f, fb = _pool()
    res = run(x, f, fb, random_policy, n_iter=19, n_init=1, seed=3)
    assert all(len(set(r.tolist())) == 20 for r in res.queries)  # the whole pool, once each
    assert torch.allclose(res.simple_regret[:, -1], torch.zeros(8, dtype=torch.float64))
    assert (res.simple_regret.diff(dim=1) <= 0).all()
    brute = f.max(-1).values - torch.stack([f[b, res.queries[b, :5]].max() for b in range(8)])
    assert torch.allclose(res.simple_regret[:, 4], brute)


def test_blind_policy_queries_feedback_argmax_first():
    x, f, fb = _pool()
    res = run(x, f, fb, blind_feedback_policy, n_iter=1, seed=0)
    for b in range(8):
        s = fb[b, 0].clone()
        s[res.queries[b, 0]] = -math.inf  # the random first query is excluded
        s = torch.nan_to_num(s, nan=-math.inf)
        assert int(res.queries[b, 1]) == int(s.argmax())


def test_model_policy_runs_with_nan_feedback_and_is_deterministic():
    torch.manual_seed(0)
    cfg = ModelConfig(max_dim=2, n_sources=1, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    model = FICBOModel(cfg).eval()
    x, f, fb = _pool()
    fb[:, :, ::3] = math.nan
    r1 = run(x, f, fb, model_policy(model, acquisition="ts"), n_iter=5, seed=1)
    r2 = run(x, f, fb, model_policy(model, acquisition="ts"), n_iter=5, seed=1)
    assert torch.equal(r1.queries, r2.queries)
    r3 = run(x, f, fb, model_policy(model, acquisition="ei", use_feedback=False), n_iter=5)
    assert r3.queries.shape == (8, 6)


def test_run_bad_inputs():
    x, f, fb = _pool()
    with pytest.raises(ValueError, match="fb_pool"):
        run(x, f, fb[..., :19], random_policy, n_iter=2)  # feedback for 19 of 20 candidates
    with pytest.raises(ValueError, match="f_pool"):
        run(x, f[:, :19], fb, random_policy, n_iter=2)
    with pytest.raises(ValueError, match="n_init"):
        run(x, f, fb, random_policy, n_iter=25)
    with pytest.raises(ValueError, match="acquisition"):
        model_policy(FICBOModel(ModelConfig()), acquisition="ucb")
