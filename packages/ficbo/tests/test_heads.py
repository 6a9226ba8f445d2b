"""Output heads: the bar (Riemann) distribution against quadrature, the Gaussian against scipy."""

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from ficbo.heads import BarPredictive, GaussianPredictive, bar_borders
from ficbo.model import FICBOModel, ModelConfig, load, pretrain, save
from ficbo.optimize import log_expected_improvement, model_policy, run, standardize_history
from ficbo.prior import evaluate, sample_tasks


def _bar(k=7, shape=(3, 5), seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = 2 * torch.randn(*shape, k, generator=g, dtype=torch.float64)
    return BarPredictive(logits, bar_borders(k))


def _density(pred, idx, y):
    """Independent evaluation of the bar density at points ``y`` (numpy) for one candidate."""
    b = pred.borders.numpy()
    p = pred.probs[idx].numpy()
    k = np.clip(np.searchsorted(b, y, side="right") - 1, 0, len(p) - 1)
    inside = (y >= b[0]) & (y <= b[-1])
    return np.where(inside, p[k] / (b[k + 1] - b[k]), 0.0)


def test_bar_borders_have_equal_normal_mass():
    b = bar_borders(9, eps=1e-3).numpy()
    mass = np.diff(stats.norm.cdf(b))
    assert np.all(np.diff(b) > 0)
    np.testing.assert_allclose(mass, (1 - 2e-3) / 9, rtol=1e-10)
    with pytest.raises(ValueError, match="n_bars"):
        bar_borders(1)


def _integral(pred, idx, weight, lo_cut=-math.inf, hi_cut=math.inf):
    """Quadrature of ``weight(y) * density(y)`` over ``[lo_cut, hi_cut]``, bar by bar (the
    density is constant on each, so quad is exact to round-off)."""
    total = 0.0
    for lo, hi in itertools.pairwise(pred.borders.numpy()):
        a, b = max(lo, lo_cut), min(hi, hi_cut)
        if a < b:
            total += integrate.quad(lambda y: weight(y) * _density(pred, idx, y), a, b)[0]
    return total


def test_bar_density_is_normalised_and_moments_match_quadrature():
    pred = _bar()
    for idx in [(0, 0), (1, 3), (2, 4)]:
        total = _integral(pred, idx, lambda y: 1.0)
        m1 = _integral(pred, idx, lambda y: y)
        m2 = _integral(pred, idx, lambda y: y * y)
        assert total == pytest.approx(1.0, abs=1e-12)
        assert float(pred.mean[idx]) == pytest.approx(m1, abs=1e-12)
        assert float(pred.std[idx]) == pytest.approx(math.sqrt(m2 - m1**2), rel=1e-10)


def test_bar_cdf_matches_the_integrated_density():
    pred = _bar(seed=1)
    b = pred.borders.numpy()
    ys = np.concatenate([[b[0] - 1.0, b[-1] + 1.0], b, np.linspace(b[0], b[-1], 23)[1:-1] + 1e-3])
    for y in ys:
        cdf = pred.cdf(torch.full((3, 5), float(y), dtype=torch.float64))[1, 2]
        ref = _integral(pred, (1, 2), lambda t: 1.0, hi_cut=float(y))
        assert float(cdf) == pytest.approx(ref, abs=1e-12), y


@pytest.mark.parametrize("where", ["below", "inside", "border", "above"])
def test_bar_ei_matches_quadrature(where):
    pred = _bar(seed=2)
    b = pred.borders.numpy()
    best = {
        "below": b[0] - 0.5,
        "inside": 0.5 * (b[2] + b[3]) + 0.01,
        "border": b[4],
        "above": b[-1] + 0.1,
    }[where]
    ei = pred.ei(torch.full((3, 5), best, dtype=torch.float64))
    for idx in [(0, 1), (2, 3)]:
        ref = _integral(pred, idx, lambda y: y - best, lo_cut=best)
        assert float(ei[idx]) == pytest.approx(ref, abs=1e-12)


def test_bar_nll_is_minus_log_density_and_clamps_outside_the_support():
    pred = _bar(seed=3)
    b = pred.borders.numpy()
    y = torch.tensor(
        np.linspace(b[0] + 1e-6, b[-1] - 1e-6, 15)[:15:3][:5], dtype=torch.float64
    ).expand(3, 5)
    ref = -np.log(
        [[_density(pred, (i, j), float(y[i, j])) for j in range(5)] for i in range(3)]
    ).mean()
    assert float(pred.nll(y)) == pytest.approx(ref, rel=1e-12)
    far = torch.full((3, 5), 100.0, dtype=torch.float64)
    edge = torch.full((3, 5), float(b[-1]) - 1e-9, dtype=torch.float64)
    assert float(pred.nll(far)) == pytest.approx(float(pred.nll(edge)))


def test_bar_samples_follow_the_cdf_monte_carlo():
    pred = _bar(k=5, shape=(1, 1), seed=4)
    n = 40_000
    big = BarPredictive(pred.logits.expand(n, 1, -1), pred.borders)
    draws = big.sample(torch.Generator().manual_seed(0))[:, 0]
    b = pred.borders
    assert ((draws >= b[0]) & (draws <= b[-1])).all()
    for y in torch.linspace(float(b[0]) + 0.1, float(b[-1]) - 0.1, 9, dtype=torch.float64):
        p = float(pred.cdf(y.expand(1, 1))[0, 0])
        emp = float((draws <= y).double().mean())
        assert abs(emp - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-12


def test_gaussian_predictive_cdf_nll_and_sampling_against_scipy():
    g = torch.Generator().manual_seed(5)
    mu, sd = (
        torch.randn(4, 6, generator=g, dtype=torch.float64),
        torch.rand(4, 6, generator=g, dtype=torch.float64) + 0.2,
    )
    y = torch.randn(4, 6, generator=g, dtype=torch.float64)
    pred = GaussianPredictive(mu, sd)
    np.testing.assert_allclose(pred.cdf(y).numpy(), stats.norm.cdf(y, mu, sd), rtol=1e-12)
    assert float(pred.nll(y)) == pytest.approx(-stats.norm.logpdf(y, mu, sd).mean(), rel=1e-12)


@pytest.mark.parametrize("z", [-3.0, -1.0, 0.0, 0.7, 4.0])
def test_log_ei_is_log_of_ei_where_ei_is_representable(z):
    mu = torch.tensor([z * 0.5 + 0.2], dtype=torch.float64)
    sd = torch.tensor([0.5], dtype=torch.float64)
    best = torch.tensor([0.2], dtype=torch.float64)
    ref, _ = integrate.quad(
        lambda y: (y - 0.2) * stats.norm.pdf(y, float(mu), 0.5), 0.2, float(mu) + 12
    )
    assert float(log_expected_improvement(mu, sd, best)) == pytest.approx(math.log(ref), rel=1e-8)


@pytest.mark.parametrize("z", [-40.0, -300.0, -1e4])
def test_log_ei_far_below_the_incumbent_matches_the_asymptotic_series(z):
    # h(z) = phi(z) + z Phi(z) = phi(z) / z^2 (1 - 3/z^2 + 15/z^4 - ...): EI underflows, log-EI not.
    zt = torch.tensor([z], dtype=torch.float64)
    one = torch.ones(1, dtype=torch.float64)
    ref = (
        -0.5 * z * z
        - 0.5 * math.log(2 * math.pi)
        - 2 * math.log(-z)
        + math.log(1 - 3 / z**2 + 15 / z**4)
    )
    # series truncation ~ 105 / z^6; cancellation in the bracket ~ 1e-16 z^2
    assert float(log_expected_improvement(zt, one, 0 * one)) == pytest.approx(
        ref, abs=105 / z**6 + 1e-14 * z * z + 1e-12
    )


def test_standardize_history():
    y = torch.tensor([[1.0, 3.0, 5.0], [2.0, 2.0, 2.0]], dtype=torch.float64)
    out = standardize_history(y)
    assert torch.allclose(out[0], torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64))
    assert (out[1] == 0).all()  # constant history: centred, not divided by 0
    assert (standardize_history(y[:, :1]) == 0).all()


def test_bar_head_model_is_a_valid_distribution_pretrains_and_round_trips(tmp_path):
    cfg = ModelConfig(
        max_dim=2, n_sources=1, d_model=16, n_heads=2, n_layers=1, d_ff=32, head="bar", n_bars=16
    )
    model, stats_ = pretrain(cfg, steps=3, batch_size=4, n_points=10, seed=0)
    assert math.isfinite(stats_["final_loss"])
    g = torch.Generator().manual_seed(0)
    inp = (
        torch.rand(2, 4, 2, generator=g),
        torch.randn(2, 4, generator=g),
        torch.randn(2, 1, 4, generator=g),
        torch.rand(2, 6, 2, generator=g),
        torch.randn(2, 1, 6, generator=g),
    )
    pred = model.predict(*inp)
    assert isinstance(pred, BarPredictive) and pred.probs.shape == (2, 6, 16)
    assert torch.allclose(pred.probs.sum(-1), torch.ones(2, 6), atol=1e-6)
    mean, std = model(*inp)
    assert (std > 0).all() and torch.equal(mean, pred.mean)
    save(model, tmp_path / "bar.pt")
    again = load(tmp_path / "bar.pt")
    assert again.config.head == "bar" and torch.equal(again.predict(*inp).logits, pred.logits)
    with pytest.raises(ValueError, match="head"):
        ModelConfig(head="mixture")
    # both acquisitions run on it
    tasks = sample_tasks(3, 2, 1, generator=g)
    x = torch.rand(3, 12, 2, generator=g, dtype=torch.float64)
    f, fb = evaluate(tasks, x, generator=g)
    for acq in ("ei", "ts"):
        res = run(x, f, fb, model_policy(FICBOModel(cfg).eval(), acquisition=acq), n_iter=4)
        assert all(len(set(q.tolist())) == 5 for q in res.queries)
