"""The unconditional depth-L init bound: the Stein floor on random covariances (and its
erf closed form), validity over fresh initialisations by Monte-Carlo, the width the
experiment needs, and the depth-L change-of-measure stability bound."""

import itertools
import math

import numpy as np
import pytest
import torch

from langevin_ntk import MLP
from langevin_ntk.bounds import (
    init_lambda_min_bound,
    last_layer_gram,
    stability_failure_bound,
)
from langevin_ntk.deep_bounds import (
    deep_gram_infinite_width,
    deep_init_failure_probability,
    deep_stability_failure_bound,
    deep_unconditional_init_bound,
    infinite_width_floor,
    stein_contraction,
)
from langevin_ntk.experiments import ntk_stability
from langevin_ntk.experiments._common import make_data
from langevin_ntk.kernels import gaussian_expectation
from langevin_ntk.models import get_activation
from langevin_ntk.ntk import mlp_ntk

F64 = torch.float64
BOUNDED = ["tanh", "erf", "sigmoid"]


def _sphere(n, d, seed):
    x = torch.randn(n, d, dtype=F64, generator=torch.Generator().manual_seed(seed))
    return x / x.norm(dim=1, keepdim=True) * math.sqrt(d)


def _random_cov(n, seed, scale):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n + 2, dtype=F64, generator=g)
    c = a @ a.T / (n + 2)
    return scale * c / torch.diagonal(c).max()  # largest variance = scale


@pytest.mark.parametrize("name", BOUNDED)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stein_floor_holds_on_random_covariances(name, seed):
    """lambda_min(G(C)) >= c nu(max C_ii, c) for every 0 < c <= lambda_min(C), and the
    variance-s^2 worst case the chain uses is below it (nu non-increasing in the variance)."""
    act = get_activation(name)
    cov = _random_cov(7, seed, scale=0.3 + 0.3 * seed)
    lam_c = float(torch.linalg.eigvalsh(cov)[0])
    g = gaussian_expectation(act.fn, act.fn, cov, order=64)
    lam_g = float(torch.linalg.eigvalsh(g)[0])
    vmax = float(torch.diagonal(cov).max())
    for c in (lam_c, 0.5 * lam_c):
        floor = c * stein_contraction(act, vmax, c)
        worst = c * stein_contraction(act, act.sup_abs**2, c)
        # quadrature error of both sides is ~1e-12 at these orders; eigvalsh adds eps * ||G||
        assert lam_g >= floor - 1e-10 * max(1.0, float(g.norm())), (lam_g, floor)
        assert worst <= floor + 1e-12


@pytest.mark.parametrize("name", BOUNDED)
def test_stein_floor_is_tight_for_small_isotropic_covariances(name):
    """C = eps I: G(C) = diag(Var sigma) + mean^2 11^T, lambda_min = Var sigma(sqrt(eps) Z)
    ~ eps sigma'(0)^2 = c nu(eps, eps) to first order: a constant off by any factor fails."""
    act = get_activation(name)
    eps = 1e-4
    g = gaussian_expectation(act.fn, act.fn, eps * torch.eye(3, dtype=F64), order=64)
    lam = float(torch.linalg.eigvalsh(g)[0])
    floor = eps * stein_contraction(act, eps, eps)
    assert floor <= lam
    assert floor / lam > 1 - 1e-3


def test_stein_contraction_erf_closed_form():
    """E_z erf'(a + z) = (2/sqrt(pi)) e^{-a^2/(1+2c)}/sqrt(1+2c); squared and averaged over
    a ~ N(0, v - c): (4/pi)/(1+2c) / sqrt(1 + 4(v-c)/(1+2c))."""
    for v, c in [(1.0, 1.0), (1.0, 0.1), (0.7, 0.3), (2.5, 0.01)]:
        exact = (4 / math.pi) / (1 + 2 * c) / math.sqrt(1 + 4 * (v - c) / (1 + 2 * c))
        # order 128: 1e-16 at v <= 1, 1e-10 at v = 2.5, c = 0.01 (the narrowest integrand)
        assert stein_contraction("erf", v, c) == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize("name", BOUNDED)
def test_stein_contraction_monotone(name):
    """The worst case over the diagonal sits at the largest variance (nu non-increasing in v),
    and a smaller floor c never lowers nu (coarser conditioning): what the chain relies on."""
    vs = np.linspace(0.05, 1.0, 12)
    for c in (0.01, 0.04):
        nus = [stein_contraction(name, v, c) for v in vs]
        assert all(b <= a + 1e-13 for a, b in itertools.pairwise(nus))
    cs = np.linspace(0.01, 0.9, 10)
    nus = [stein_contraction(name, 1.0, c) for c in cs]
    assert all(b <= a + 1e-13 for a, b in itertools.pairwise(nus))


def test_depth_two_reduces_to_the_one_hidden_layer_bound():
    x = _sphere(6, 9, 1)
    lam = float(torch.linalg.eigvalsh(last_layer_gram(x, "tanh"))[0])
    b = deep_unconditional_init_bound(x, 900, 2, 0.1)
    assert b["kappa"] == pytest.approx(init_lambda_min_bound(900, 6, lam, 1.0, 0.1), rel=1e-12)
    assert b["infinite_width"] == pytest.approx(lam, rel=1e-12)
    y = torch.randn(6, dtype=F64)
    lbar = 0.5 * (6 + float((y**2).sum()))
    got = deep_stability_failure_bound(x, y, 10**5, 2, 0.3, 0.5)["bound"]
    assert got == pytest.approx(stability_failure_bound(10**5, 6, lam, 1.0, 0.5, lbar, 0.3))


@pytest.mark.parametrize(
    ("depth", "width", "dtype"),
    [(3, 1000, F64), pytest.param(4, 5000, torch.float32, marks=pytest.mark.slow)],
)
def test_bound_holds_over_fresh_initialisations(depth, width, dtype):
    """Every layer redrawn (not only the last): the fraction of draws with lambda_min(K_0)
    at or below kappa stays within the level plus 3 binomial SE."""
    x, p = _sphere(5, 16, 5), 0.2
    draws = 50 if depth == 3 else 16
    b = deep_unconditional_init_bound(x, width, depth, p)
    assert b["kappa"] > 0
    below = 0
    for s in range(draws):
        net = MLP(16, width, depth, "tanh", generator=torch.Generator().manual_seed(100 + s))
        net = net.to(dtype)
        k = mlp_ntk(net, x.to(dtype)).to(F64)
        below += float(torch.linalg.eigvalsh(k)[0]) <= b["kappa"]
    assert below / draws <= p + 3 * math.sqrt(p * (1 - p) / draws)


def test_bound_tightens_with_width_towards_its_limit_and_stays_below_sigma_l():
    """The derivation predicts kappa/m increasing in m, below the chain's limit, which is
    below lambda_min(Sigma^L) (the Stein floor only loses)."""
    x = _sphere(5, 16, 5)
    for depth in (3, 4):
        lim = infinite_width_floor(x, depth)
        true = float(torch.linalg.eigvalsh(deep_gram_infinite_width(x, depth, "tanh"))[0])
        assert 0 < lim <= true
        # the chain loses at most a factor nu(1, .) >= (E tanh'(Z))^2 ~ 0.37 per layer
        assert lim >= true * 0.3 ** (depth - 2)
        per_width = [
            deep_unconditional_init_bound(x, m, depth, 0.1)["kappa"] / m
            for m in (3000, 10_000, 100_000, 10**6)
        ]
        assert all(b > a for a, b in itertools.pairwise(per_width))
        assert per_width[-1] < lim and per_width[-1] > 0.8 * lim


def test_bound_is_not_vacuous_at_the_experiments_deep_widths():
    """ntk-stability's R5 uses these widths on its data: the derivation says kappa > 0 there
    (it is 0 below width 1130 at n = 8, level 0.1)."""
    x, _ = make_data(ntk_stability.N, ntk_stability.D, seed=0)
    for m in ntk_stability.DEEP_INIT_WIDTHS:
        assert deep_unconditional_init_bound(x, m, 3, ntk_stability.P_INIT)["kappa"] > 0


def test_failure_probability_and_threshold_agree_with_the_level_form():
    """At the delta that the level form solved for, the probability form gives back at most
    the level (each layer's term equals its level when the deltas are equal)."""
    x = _sphere(5, 16, 5)
    r = deep_init_failure_probability(x, 10**5, 3, 0.3)
    assert 0 < r["prob"] < 1 and r["kappa"] > 0
    lam = float(torch.linalg.eigvalsh(last_layer_gram(x, "tanh"))[0])
    # first layer alone: n exp(-h m gamma / n) with gamma exact
    h = 0.3 + 0.7 * math.log(0.7)
    assert r["prob"] >= 5 * math.exp(-h * 10**5 * lam / 5)


def test_deep_stability_bound_decreases_with_width_and_temperature():
    x, y = make_data(6, 12, seed=3)
    widths = [10**5, 10**6, 10**7]
    b = [deep_stability_failure_bound(x, y, m, 3, 0.1)["bound"] for m in widths]
    assert b[0] >= b[1] > b[2] > 0
    assert deep_stability_failure_bound(x, y, 10**7, 3, 1.0)["bound"] < b[2]


def test_bad_input():
    x = _sphere(3, 4, 11)
    with (
        pytest.warns(UserWarning, match="not smooth"),
        pytest.raises(ValueError, match="unbounded"),
    ):
        deep_unconditional_init_bound(x, 100, 3, 0.1, "relu")
    with pytest.raises(ValueError, match="depth"):
        deep_unconditional_init_bound(x, 100, 1, 0.1)
    with pytest.raises(ValueError, match="failure_prob"):
        deep_unconditional_init_bound(x, 100, 3, 1.0)
    with pytest.raises(ValueError, match="width"):
        deep_unconditional_init_bound(x, 0, 3, 0.1)
    with pytest.raises(ValueError, match="floor"):
        stein_contraction("tanh", 0.5, 0.6)
    with pytest.raises(ValueError, match="temperature"):
        deep_stability_failure_bound(x, torch.ones(3), 100, 3, 0.0)
    with pytest.raises(ValueError, match="delta"):
        deep_init_failure_probability(x, 100, 3, 1.0)
    assert deep_unconditional_init_bound(x, 5, 3, 0.1)["kappa"] == 0.0  # too narrow
