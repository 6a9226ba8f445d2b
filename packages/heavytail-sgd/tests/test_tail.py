"""Tail-index estimators on the package's noise models, and on an exact Pareto sample."""

import math
import statistics

import pytest
import torch

from heavytail_sgd.noise import StudentT, SymmetricAlphaStable, SymmetricPareto
from heavytail_sgd.tail import default_k, estimate_tail_index, hill, moment_estimator

# tolerances here follow an error model; `nox -s numerics` reruns them on every BLAS path
pytestmark = pytest.mark.numerics

MODELS = [
    SymmetricAlphaStable(1.2),
    SymmetricAlphaStable(1.5),
    SymmetricAlphaStable(1.8),
    StudentT(1.5),
    StudentT(3.0),
    SymmetricPareto(1.5),
]


def _asymptotic_sd(alpha, k, method):
    # Hill: sqrt(k)(a_hat - a) -> N(0, a^2). Moment: sqrt(k)(g_hat - g) -> N(0, 1 + g^2) for
    # g = 1/a, mapped to a by the delta method (|da/dg| = a^2).
    if method == "hill":
        return alpha / math.sqrt(k)
    return alpha * math.sqrt(alpha**2 + 1) / math.sqrt(k)


@pytest.mark.parametrize("method", ["hill", "moment"])
@pytest.mark.parametrize("model", MODELS, ids=repr)
def test_interval_covers_true_index_in_most_seeds(model, method):
    n, seeds = 50_000, 10
    cover, est = 0, []
    for s in range(seeds):
        x = model.sample(n, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
        e = estimate_tail_index(x, method)
        cover += e.ci_low < model.tail_index < e.ci_high
        est.append(e.alpha)
    # A 95% interval: at least 8 of 10 covering (P[<= 7 of 10] ~ 1% if calibrated).
    assert cover >= 8
    # The median over seeds (1/gamma_hat is right-skewed, so not the mean) within 3 standard
    # errors of the truth; a median of m normal draws has standard error 1.2533 sd / sqrt(m).
    se = 1.2533 * _asymptotic_sd(model.tail_index, default_k(n), method) / math.sqrt(seeds)
    assert abs(statistics.median(est) - model.tail_index) < 3 * se


def test_hill_on_exact_pareto_is_the_mle_with_its_known_spread():
    # For an exact Pareto tail, Hill with k = n - 1 is the MLE: a/alpha_hat ~ Gamma(k)/k.
    m = SymmetricPareto(2.0, scale=1.0)
    a = [
        hill(m.sample(2001, generator=torch.Generator().manual_seed(s)), k=2000).alpha
        for s in range(40)
    ]
    mean = sum(a) / len(a)
    sd = math.sqrt(sum((v - mean) ** 2 for v in a) / (len(a) - 1))
    assert mean == pytest.approx(2.0, abs=4 * 2.0 / math.sqrt(2000) / math.sqrt(40))
    assert sd == pytest.approx(2.0 / math.sqrt(2000), rel=0.35)


def test_hill_hand_computed():
    x = torch.tensor([8.0, 4.0, 2.0, 1.0] + [0.5] * 10)
    e = hill(x, k=3)
    # log-excesses over X_(4) = 1: log 8, log 4, log 2 -> mean 2 log 2.
    assert e.alpha == pytest.approx(1 / (2 * math.log(2)))
    assert e.ci_high - e.alpha == pytest.approx(1.959964 * e.alpha / math.sqrt(3), rel=1e-5)


def test_gaussian_noise_reads_as_light_tailed():
    x = torch.randn(50_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    # Hill on a light tail grows with k/n -> 0 only slowly, but its value is far above 2.
    assert hill(x).alpha > 3


def test_default_k_and_estimate_fields():
    assert default_k(10_000) == 100
    x = SymmetricPareto(1.5).sample(10_000, generator=torch.Generator().manual_seed(0))
    e = moment_estimator(x, level=0.9)
    assert e.k == 100 and e.n == 10_000 and e.level == 0.9 and e.method == "moment"
    assert e.finite_moment(0.5) and not e.finite_moment(3.0)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda x: hill(x, k=0), "k must"),
        (lambda x: hill(x, k=len(x)), "k must"),
        (lambda x: hill(x[:5]), "at least 12"),
        (lambda x: hill(x, level=1.5), "level"),
        (lambda x: estimate_tail_index(x, "pickands"), "method"),
        (lambda x: hill(torch.zeros(100)), "zero"),
    ],
)
def test_bad_inputs(call, match):
    x = SymmetricPareto(1.5).sample(100, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=match):
        call(x)
