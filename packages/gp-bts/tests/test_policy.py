import math
import warnings

import pytest
import torch
from botorch.generation.sampling import MaxPosteriorSampling
from botorch.sampling.pathwise import draw_matheron_paths

from gp_bts.models import KernelSpec, build_model
from gp_bts.policy import choose_sampler, thompson_batch, uncertainty_batch

warnings.filterwarnings("ignore", message=".*not p.d.*")


def _setup(n_train=7, n_cand=9, noise_var=0.05, seed=0, name="se"):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n_train, 2, generator=g, dtype=torch.float64)
    y = torch.sin(6 * x[:, :1]) + x[:, 1:] ** 2
    cands = torch.rand(n_cand, 2, generator=g, dtype=torch.float64)
    spec = KernelSpec(name, lengthscale=0.35, outputscale=1.3)
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    model = build_model(x, y, bounds=bounds, noise_var=noise_var, kernel=spec)
    return x, y, cands, spec, model


def _reference_posterior(x, y, cands, spec, noise_var):
    """Independent float64 GP posterior: mu = K*X (K + s2 I)^-1 y, S = K** - K*X (.)^-1 KX*."""
    kxx = spec.matrix(x) + noise_var * torch.eye(len(x), dtype=torch.float64)
    ksx = spec.matrix(cands, x)
    chol = torch.linalg.cholesky(kxx)
    a = torch.cholesky_solve(ksx.T, chol)
    mu = (a.T @ y).squeeze(-1)
    cov = spec.matrix(cands) - ksx @ a
    return mu, cov


def test_exact_samples_match_the_gp_posterior_monte_carlo():
    x, y, cands, spec, model = _setup()
    mu, cov = _reference_posterior(x, y, cands, spec, 0.05)
    torch.manual_seed(11)
    s = 10_000
    with torch.no_grad():
        draws = model.posterior(cands).rsample(torch.Size([s])).squeeze(-1)
    sd = cov.diagonal().sqrt()
    # mean: each entry's MC error has sd sigma_i / sqrt(S); 5 sd is a per-entry 6e-7 tail.
    assert ((draws.mean(0) - mu).abs() <= 5 * sd / math.sqrt(s)).all()
    # covariance: Var(hat S_ij) ~ (S_ii S_jj + S_ij^2) / S for Gaussian draws.
    emp = torch.cov(draws.T)
    err_sd = ((sd[:, None] * sd[None, :]) ** 2 + cov**2).sqrt() / math.sqrt(s)
    assert ((emp - cov).abs() <= 5 * err_sd + 1e-7).all()


def test_bts_argmax_law_matches_independent_sampler():
    """P(x_{t,q} = x) from the policy vs argmax frequencies of our own float64 MVN draws."""
    x, y, cands, spec, model = _setup(n_cand=6, seed=3)
    mu, cov = _reference_posterior(x, y, cands, spec, 0.05)
    chol = torch.linalg.cholesky(cov + 1e-12 * torch.eye(6, dtype=torch.float64))
    g = torch.Generator().manual_seed(5)
    ref = mu + torch.randn(200_000, 6, generator=g, dtype=torch.float64) @ chol.T
    p_ref = torch.bincount(ref.argmax(-1), minlength=6).double() / len(ref)
    torch.manual_seed(7)
    idx, sigma = thompson_batch(model, cands, 20_000, sampler="exact")
    p_bts = torch.bincount(idx, minlength=6).double() / len(idx)
    # binomial sd of the policy frequencies (the reference's is 10x smaller): 5 sd
    tol = 5 * (p_ref * (1 - p_ref) / len(idx)).sqrt() + 5e-4
    assert ((p_bts - p_ref).abs() <= tol).all()
    assert torch.allclose(sigma, cov.diagonal()[idx].sqrt(), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("q", [1, 5])
def test_bts_equals_botorch_max_posterior_sampling_same_seed(q):
    _, _, cands, _, model = _setup(n_cand=50, seed=q)
    for seed in range(5):
        torch.manual_seed(seed)
        idx, _ = thompson_batch(model, cands, q, sampler="exact")
        torch.manual_seed(seed)
        ref = MaxPosteriorSampling(model, replacement=True)(cands, num_samples=q)
        assert torch.equal(cands[idx], ref)


def test_pathwise_samples_match_the_posterior_within_feature_error():
    x, y, cands, spec, model = _setup(n_cand=5, seed=2)
    mu, cov = _reference_posterior(x, y, cands, spec, 0.05)
    torch.manual_seed(0)
    with torch.no_grad():
        paths = draw_matheron_paths(model, sample_shape=torch.Size([4000]))
        draws = paths(cands)
    sd = cov.diagonal().sqrt()
    # random Fourier features approximate the prior; the error is O(1/sqrt(features)) of the
    # prior scale (1.3), far above the MC error 5 sd / sqrt(4000) = 0.08 sd.
    assert ((draws.mean(0) - mu).abs() <= 0.08 * sd + 0.05).all()
    assert ((torch.cov(draws.T) - cov).abs() <= 0.15 * 1.3).all()
    torch.manual_seed(1)
    idx, sig = thompson_batch(model, cands, 3, sampler="pathwise")
    assert idx.shape == (3,) and torch.allclose(sig, sd[idx], rtol=1e-6)


def test_uncertainty_batch_matches_refitting_the_gp():
    """Route 1: rank-one variance updates. Route 2: rebuild the BoTorch GP with fake values."""
    x, y, cands, spec, model = _setup(n_cand=30, seed=4, noise_var=0.02)
    with torch.no_grad():
        cov = model.posterior(cands).mvn.covariance_matrix
    idx, sigma = uncertainty_batch(cov, 4, 0.02)
    xs, ys = x.clone(), y.clone()
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    for j in idx.tolist():
        m = build_model(xs, ys, bounds=bounds, noise_var=0.02, kernel=spec)
        with torch.no_grad():
            var = m.posterior(cands).variance.squeeze(-1)
        assert int(var.argmax()) == j
        xs, ys = torch.cat([xs, cands[j : j + 1]]), torch.cat([ys, torch.zeros(1, 1)])
    assert torch.allclose(sigma, cov.diagonal()[idx].sqrt())


def test_choice_and_bad_inputs():
    assert choose_sampler(1000) == "exact" and choose_sampler(1001) == "pathwise"
    _, _, cands, _, model = _setup()
    with pytest.raises(ValueError, match="batch_size"):
        thompson_batch(model, cands, 0)
    with pytest.raises(ValueError, match="sampler"):
        thompson_batch(model, cands, 1, sampler="magic")
    with pytest.raises(ValueError, match="noise_var"):
        uncertainty_batch(torch.eye(3, dtype=torch.float64), 2, 0.0)
