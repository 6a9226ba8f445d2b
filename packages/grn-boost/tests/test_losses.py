"""Losses: derivatives against torch autograd, Lipschitz constants against a brute-force sup."""

import math

import numpy as np
import pytest
import torch

from grn_boost.losses import LOSSES, get_loss

# independent torch definitions of the same losses (float64)
TORCH = {
    "squared": lambda y, f: 0.5 * (f - y) ** 2,
    "pseudo_huber": lambda y, f: 1.7**2 * (torch.sqrt(1 + ((f - y) / 1.7) ** 2) - 1),
    "logcosh": lambda y, f: torch.log(torch.cosh(f - y)),
    "squared_logcosh": lambda y, f: 0.5 * (f - y) ** 2 + torch.log(torch.cosh(f - y)),
    "logistic": lambda y, f: torch.nn.functional.softplus(f) - y * f,
    "poisson": lambda y, f: torch.exp(f) - y * f,
}
PARAMS = {"pseudo_huber": {"delta": 1.7}}
SCALAR = sorted(n for n in LOSSES if n != "softmax")  # softmax: tests/test_multiclass.py


def _labels(name, rng, n):
    if name == "logistic":
        return rng.integers(0, 2, n).astype(float)
    if name == "poisson":
        return rng.poisson(2.0, n).astype(float)
    return rng.normal(size=n) * 3


def _autograd(name, y, f):
    ft = torch.tensor(f, dtype=torch.float64, requires_grad=True)
    yt = torch.tensor(y, dtype=torch.float64)
    v = TORCH[name](yt, ft)
    (g,) = torch.autograd.grad(v.sum(), ft, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), ft, create_graph=True)
    (t,) = torch.autograd.grad(h.sum(), ft)
    return v.detach().numpy(), g.detach().numpy(), h.detach().numpy(), t.numpy()


@pytest.mark.parametrize("name", SCALAR)
def test_derivatives_match_autograd(name):
    rng = np.random.default_rng(3)
    n = 37
    y = _labels(name, rng, n)
    f = rng.normal(size=n) * 2.5
    loss = get_loss(name, **PARAMS.get(name, {}))
    v, g, h, t = _autograd(name, y, f)
    # separable losses: the tolerance is a few ulps of each term's own size
    for mine, ref in ((loss.value(y, f), v), (loss.grad(y, f), g), (loss.hess(y, f), h)):
        np.testing.assert_allclose(mine, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(loss.third(y, f), t, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["pseudo_huber", "logcosh", "squared_logcosh", "logistic"])
def test_hessian_lipschitz_is_the_sup_of_the_third_derivative(name):
    loss = get_loss(name, **PARAMS.get(name, {}))
    y = np.zeros(1) if name != "logistic" else np.ones(1)
    f = np.linspace(-12, 12, 400_001)  # grid step 6e-5: the max is flat, error O(step^2)
    sup = np.max(np.abs(loss.third(np.broadcast_to(y, f.shape), f)))
    assert loss.hessian_lipschitz == pytest.approx(sup, rel=1e-8)


def test_squared_and_poisson_constants():
    assert get_loss("squared").hessian_lipschitz == 0.0
    p = get_loss("poisson")
    assert p.hessian_lipschitz is None
    f = np.array([0.0, math.log(3.0)])
    assert p.local_hessian_lipschitz(np.ones(2), f) == pytest.approx(3.0)


def test_pseudo_huber_value_is_stable_far_out_and_near_zero():
    loss = get_loss("pseudo_huber", delta=1.0)
    assert loss.value(np.zeros(1), np.array([1e200]))[0] == pytest.approx(1e200)
    # near 0: r^2/2 - r^4/8, no cancellation
    r = 1e-9
    assert loss.value(np.zeros(1), np.array([r]))[0] == pytest.approx(r * r / 2, rel=1e-12)


@pytest.mark.parametrize("name", ["squared", "pseudo_huber", "logcosh", "logistic", "poisson"])
def test_init_score_is_a_minimising_constant(name):
    rng = np.random.default_rng(5)
    y = _labels(name, rng, 101)  # odd size: the median is a sample
    loss = get_loss(name, **PARAMS.get(name, {}))
    c = loss.init_score(y)
    if name in ("squared", "logistic", "poisson"):  # exact: the mean-gradient vanishes
        assert abs(np.mean(loss.grad(y, np.full_like(y, c)))) < 1e-12
    else:  # the median: a good start, not the minimiser; check it is finite and inside
        assert y.min() <= c <= y.max()


def test_bad_labels_and_names():
    with pytest.raises(ValueError, match="labels >= 0"):
        get_loss("poisson").check_labels([1.0, -1.0])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        get_loss("logistic").check_labels([0.0, 2.0])
    with pytest.raises(ValueError, match="non-finite"):
        get_loss("squared").check_labels([0.0, np.nan])
    with pytest.raises(ValueError, match="unknown loss"):
        get_loss("hinge")
    with pytest.raises(ValueError, match="delta > 0"):
        get_loss("pseudo_huber", delta=0.0)
    with pytest.raises(ValueError, match="does not take"):
        get_loss("logcosh", delta=1.0)
