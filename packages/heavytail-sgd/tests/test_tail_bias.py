"""The reduced-bias Hill estimator: weights, bias on a known second-order tail, spread."""

import math
import statistics

import pytest
import torch

from heavytail_sgd.noise import SymmetricPareto
from heavytail_sgd.tail import estimate_tail_index, hill
from heavytail_sgd.tail_bias import default_k_reduced_bias, hill_reduced_bias, intercept_weights

pytestmark = pytest.mark.numerics


@pytest.mark.parametrize("k", [3, 17, 250, 1001])
def test_intercept_weights_are_the_least_squares_intercept(k):
    # independent route: a least-squares solver on the design [1, j/(k+1)]
    x = torch.arange(1, k + 1, dtype=torch.float64) / (k + 1)
    a = torch.stack([torch.ones_like(x), x], 1)
    z = torch.randn(k, generator=torch.Generator().manual_seed(k), dtype=torch.float64)
    ref = torch.linalg.lstsq(a, z[:, None], driver="gelsd").solution[0, 0]
    c = intercept_weights(k)
    # error model: a sum of k products, ~k eps relative to the terms' size
    tol = 16 * k * torch.finfo(torch.float64).eps * float(z.abs().max() * c.abs().max() * k)
    assert float((c * z).sum()) == pytest.approx(float(ref), abs=tol)
    assert float(c.sum()) == pytest.approx(1.0, abs=1e-12)
    assert float((c * x).sum()) == pytest.approx(0.0, abs=1e-12)
    if k > 200:  # k sum c_j^2 -> int_0^1 (4 - 6x)^2 dx = 4
        assert k * float((c * c).sum()) == pytest.approx(4.0, rel=0.02)


def _second_order_sample(n, gamma, c, g):
    # X = Y^gamma (1 + c / Y), Y standard Pareto: U(t) = t^gamma (1 + c/t), second order rho = -1
    y = 1 / torch.rand(n, generator=g, dtype=torch.float64)
    return y**gamma * (1 + c / y)


def test_reduced_bias_removes_the_second_order_bias_that_hill_has():
    gamma, n, k, reps = 1 / 1.5, 20_000, 2_000, 40
    g = torch.Generator().manual_seed(0)
    h, r = [], []
    for _ in range(reps):
        x = _second_order_sample(n, gamma, 2.0, g)
        h.append(hill(x, k=k).gamma)
        r.append(hill_reduced_bias(x, k=k).gamma)
    se_h = statistics.stdev(h) / math.sqrt(reps)
    se_r = statistics.stdev(r) / math.sqrt(reps)
    assert statistics.mean(h) - gamma < -10 * se_h  # Hill: biased (measured -0.087, 33 se)
    assert abs(statistics.mean(r) - gamma) < 3 * se_r  # reduced bias: none left to 3 se
    # its spread is the model's gamma ||c||, ~ 2 gamma / sqrt(k), within the Monte-Carlo error
    # of a sample sd of 40 (3 x 1/sqrt(78) = 34%)
    sd_model = gamma * float(torch.linalg.vector_norm(intercept_weights(k)))
    assert statistics.stdev(r) == pytest.approx(sd_model, rel=0.34)


def test_on_an_exact_pareto_tail_it_is_unbiased_and_covers():
    reps, cover, est = 60, 0, []
    for s in range(reps):
        x = SymmetricPareto(1.5).sample(5_000, generator=torch.Generator().manual_seed(s))
        e = hill_reduced_bias(x)
        est.append(e.alpha)
        cover += e.ci_low <= 1.5 <= e.ci_high
    # 95% intervals: at least 51 of 60 (P[X <= 50] < 1% for Binomial(60, 0.95))
    assert cover >= 51
    sd = 2 * 1.5 / math.sqrt(default_k_reduced_bias(5_000))
    assert statistics.median(est) == pytest.approx(1.5, abs=3 * 1.2533 * sd / math.sqrt(reps))


def test_fields_default_k_and_dispatch():
    x = SymmetricPareto(1.5).sample(10_000, generator=torch.Generator().manual_seed(0))
    e = estimate_tail_index(x, "hill-rb", level=0.9)
    assert e.method == "hill-rb" and e.k == 400 == default_k_reduced_bias(10_000)
    assert e.level == 0.9 and e.n == 10_000 and e.gamma == pytest.approx(1 / e.alpha)
    assert default_k_reduced_bias(100) == 25  # capped at n // 4


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda x: hill_reduced_bias(x, k=2), "k must"),
        (lambda x: hill_reduced_bias(x, k=len(x) - 1), "k must"),
        (lambda x: hill_reduced_bias(x[:8]), "at least 12"),
        (lambda x: hill_reduced_bias(x, level=0.0), "level"),
        (lambda x: intercept_weights(2), "k must"),
    ],
)
def test_bad_inputs(call, match):
    x = SymmetricPareto(1.5).sample(100, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=match):
        call(x)
