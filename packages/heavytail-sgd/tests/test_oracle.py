"""The oracle: unbiased noisy gradients with the noise model's law."""

import pytest
import torch
from scipy import stats

from heavytail_sgd.noise import StudentT, SymmetricPareto
from heavytail_sgd.oracle import HeavyTailedOracle, add_gradient_noise_

A = torch.tensor([[2.0, 1.0], [1.0, 3.0]], dtype=torch.float64)


def quad(x):
    return 0.5 * x @ A @ x


def test_autograd_and_given_gradient_agree_and_noise_is_the_model():
    x = torch.tensor([1.0, -2.0], dtype=torch.float64)
    auto = HeavyTailedOracle(quad, StudentT(3.0), scale=0.5, seed=0)
    given = HeavyTailedOracle(quad, StudentT(3.0), grad=lambda z: A @ z, scale=0.5, seed=0)
    v1, g1 = auto(x)
    _, g2 = given(x)
    assert float(v1) == pytest.approx(float(quad(x)))
    torch.testing.assert_close(g1, g2, rtol=0, atol=1e-12)
    errs = torch.stack([auto.grad(x) - A @ x for _ in range(1500)]).flatten()
    # Errors are 0.5 * t_3: a KS test against scipy's t law.
    assert stats.kstest(errs.numpy() / 0.5, stats.t(3.0).cdf).pvalue > 0.01
    assert auto.calls == 1501


def test_seeded_oracles_repeat():
    x = torch.zeros(2, dtype=torch.float64)
    a = HeavyTailedOracle(quad, SymmetricPareto(1.5), seed=3)
    b = HeavyTailedOracle(quad, SymmetricPareto(1.5), seed=3)
    assert torch.equal(a.grad(x), b.grad(x))
    assert not torch.equal(a.grad(x), a.grad(x))


def test_add_gradient_noise_perturbs_only_existing_grads():
    w, v = torch.zeros(3, requires_grad=True), torch.zeros(2, requires_grad=True)
    w.grad = torch.ones(3)
    add_gradient_noise_([w, v], SymmetricPareto(2.0), generator=torch.Generator().manual_seed(0))
    assert v.grad is None
    assert ((w.grad - 1).abs() >= 1.0).all()  # Pareto magnitudes are at least the scale


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"objective": 3}, "objective"),
        ({"noise": "t"}, "noise"),
        ({"scale": 0.0}, "scale"),
        ({"grad": 1}, "grad"),
    ],
)
def test_bad_oracle_arguments(kwargs, match):
    args = {"objective": quad, "noise": StudentT(3.0), **kwargs}
    objective, noise = args.pop("objective"), args.pop("noise")
    with pytest.raises(ValueError, match=match):
        HeavyTailedOracle(objective, noise, **args)


def test_non_scalar_objective_is_refused():
    o = HeavyTailedOracle(lambda x: x * 2, StudentT(3.0))
    with pytest.raises(ValueError, match="scalar"):
        o(torch.ones(2))
