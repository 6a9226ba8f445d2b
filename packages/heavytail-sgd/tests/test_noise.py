"""Noise models against scipy's laws, closed-form tails and Monte-Carlo moments."""

import math

import pytest
import torch
from scipy import stats

from heavytail_sgd.noise import (
    StudentT,
    SymmetricAlphaStable,
    SymmetricPareto,
    norm_moment_bound,
)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("alpha", [0.8, 1.2, 1.5, 1.8, 2.0])
def test_alpha_stable_matches_scipy_levy_stable(alpha):
    # Two-sample KS against scipy's independent sampler (beta = 0, S1 = S0 parametrisation).
    x = SymmetricAlphaStable(alpha).sample(2000, generator=_gen(0), dtype=torch.float64)
    y = stats.levy_stable.rvs(alpha, 0.0, size=2000, random_state=1)
    assert stats.ks_2samp(x.numpy(), y).pvalue > 0.01


def test_alpha_stable_is_not_confused_with_a_neighbour():
    # The KS test has power at this sample size: alpha 1.2 vs scipy alpha 1.8 must be rejected.
    x = SymmetricAlphaStable(1.2).sample(2000, generator=_gen(0), dtype=torch.float64)
    y = stats.levy_stable.rvs(1.8, 0.0, size=2000, random_state=1)
    assert stats.ks_2samp(x.numpy(), y).pvalue < 0.01


def test_alpha_stable_cauchy_and_gaussian_cases_against_cdfs():
    c = SymmetricAlphaStable(1.0, scale=2.0).sample(4000, generator=_gen(3), dtype=torch.float64)
    assert stats.kstest(c.numpy(), stats.cauchy(scale=2.0).cdf).pvalue > 0.01
    g = SymmetricAlphaStable(2.0, scale=0.5).sample(4000, generator=_gen(4), dtype=torch.float64)
    # alpha = 2 is N(0, 2 c^2).
    assert stats.kstest(g.numpy(), stats.norm(scale=0.5 * math.sqrt(2)).cdf).pvalue > 0.01


def test_alpha_stable_fractional_moment_matches_closed_form():
    m = SymmetricAlphaStable(1.5, scale=1.3)
    x = m.sample(400_000, generator=_gen(5), dtype=torch.float64)
    # q = 0.5: |X|^q has finite variance (2q < alpha), so Monte-Carlo error is ~1e-3.
    assert float(x.abs().pow(0.5).mean()) == pytest.approx(m.abs_moment(0.5), rel=1e-2)


@pytest.mark.parametrize("df", [1.5, 3.0, 7.0])
def test_student_t_matches_scipy(df):
    x = StudentT(df, scale=0.7).sample(4000, generator=_gen(df.__hash__() % 97))
    assert stats.kstest(x.double().numpy(), stats.t(df, scale=0.7).cdf).pvalue > 0.01


def test_student_t_moment_closed_form_against_scipy_integral():
    m = StudentT(3.0, scale=2.0)
    ref = stats.t(3.0, scale=2.0).expect(lambda v: abs(v) ** 1.5)
    assert m.abs_moment(1.5) == pytest.approx(ref, rel=1e-6)


def test_pareto_tail_is_the_closed_form():
    m = SymmetricPareto(1.5, scale=0.5)
    x = m.sample(200_000, generator=_gen(7), dtype=torch.float64).abs()
    for level in [1.0, 4.0, 20.0]:
        emp = float((x > level).double().mean())
        exact = m.survival(level)
        # binomial standard error of the empirical frequency, 4 sigma
        se = math.sqrt(exact * (1 - exact) / x.numel())
        assert abs(emp - exact) < 4 * se
    assert float(x.min()) >= 0.5


def test_pareto_is_symmetric_and_moments_match():
    m = SymmetricPareto(3.0)
    x = m.sample(200_000, generator=_gen(8), dtype=torch.float64)
    assert abs(float((x > 0).double().mean()) - 0.5) < 4 * 0.5 / math.sqrt(x.numel())
    # q = 1 with alpha = 3: finite variance of |X|, so the Monte-Carlo mean is tight.
    assert float(x.abs().mean()) == pytest.approx(m.abs_moment(1.0), rel=1e-2)


def test_finite_moments_and_tail_indices():
    assert SymmetricAlphaStable(1.5).tail_index == 1.5
    assert SymmetricAlphaStable(2.0).tail_index == math.inf
    assert StudentT(2.5).finite_moment(2.0) and not StudentT(2.5).finite_moment(2.5)
    assert SymmetricPareto(1.2).finite_moment(1.1) and not SymmetricPareto(1.2).finite_moment(1.2)
    assert SymmetricPareto(1.2).abs_moment(1.5) == math.inf
    assert SymmetricAlphaStable(1.5).abs_moment(1.5) == math.inf


def test_sample_mean_of_infinite_variance_noise_has_heavy_fluctuations():
    # What the tail index means in practice: the sample variance of alpha-stable noise with
    # alpha < 2 keeps growing with n (no finite limit), while Student-t(5) settles.
    heavy = SymmetricAlphaStable(1.2).sample(10**6, generator=_gen(9), dtype=torch.float64)
    light = StudentT(5.0).sample(10**6, generator=_gen(9), dtype=torch.float64)
    assert float(heavy.var()) > 100 * float(light.var())
    assert float(light.var()) == pytest.approx(5 / 3, rel=0.1)


def test_seeded_sampling_is_reproducible_and_shaped():
    for m in [SymmetricAlphaStable(1.3), StudentT(2.0), SymmetricPareto(1.7)]:
        a = m.sample((3, 5), generator=_gen(11))
        b = m.sample((3, 5), generator=_gen(11))
        assert a.shape == (3, 5) and a.dtype == torch.float32 and torch.equal(a, b)
        assert torch.isfinite(a).all()


def test_norm_moment_bound_dominates_monte_carlo():
    m = StudentT(4.0)
    sigma = norm_moment_bound(m, 1.5, 10)
    x = m.sample((100_000, 10), generator=_gen(12), dtype=torch.float64)
    assert float(x.norm(dim=1).pow(1.5).mean()) <= sigma**1.5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
def test_sampling_on_cuda():
    g = torch.Generator(device="cuda").manual_seed(0)
    for m in [SymmetricAlphaStable(1.3), StudentT(2.0), SymmetricPareto(1.7)]:
        x = m.sample(1000, generator=g)
        assert x.device.type == "cuda" and torch.isfinite(x).all()


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: SymmetricAlphaStable(2.5), "alpha"),
        (lambda: SymmetricAlphaStable(0.0), "alpha"),
        (lambda: StudentT(-1.0), "df"),
        (lambda: SymmetricPareto(1.5, scale=0.0), "scale"),
        (lambda: SymmetricPareto(math.inf), "alpha"),
        (lambda: SymmetricPareto(1.5).sample((2, -1)), "shape"),
        (lambda: StudentT(2.0).sample(3, dtype=torch.int64), "dtype"),
        (lambda: SymmetricPareto(1.5).finite_moment(-1.0), "p"),
        (lambda: norm_moment_bound(SymmetricPareto(1.5), 1.6, 3), "p=1.6"),
        (lambda: norm_moment_bound(SymmetricPareto(3.0), 2.5, 3), "at most 2"),
        (lambda: norm_moment_bound(SymmetricPareto(3.0), 1.5, 0), "dim"),
    ],
)
def test_bad_inputs(make, match):
    with pytest.raises(ValueError, match=match):
        make()
