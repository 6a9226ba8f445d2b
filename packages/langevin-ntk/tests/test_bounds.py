"""The lambda_min bounds: their ingredients by Monte-Carlo, their algebra, their warnings."""

import math

import pytest
import torch

from langevin_ntk import MLP, empirical_ntk
from langevin_ntk.bounds import (
    bound_applies,
    chernoff_rate,
    expected_init_loss,
    init_failure_probability,
    init_lambda_min_bound,
    last_layer_gram,
    min_temperature_for_stability,
    min_width_for_stability,
    prior_matched_weight_decay,
    stability_failure_bound,
)

F64 = torch.float64


def _data(n=6, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=F64)
    return x / x.norm(dim=1, keepdim=True) * math.sqrt(d), torch.randn(n, generator=g, dtype=F64)


def test_gram_matches_monte_carlo_features():
    x, _ = _data()
    g = last_layer_gram(x, "tanh")
    m = 200_000
    w = torch.randn(m, x.shape[1], dtype=F64) / math.sqrt(x.shape[1])
    phi = torch.tanh(x @ w.T)
    mc = phi @ phi.T / m
    assert ((mc - g).abs() <= 5 / math.sqrt(m)).all()  # |sigma| <= 1: sd of each term <= 1


def test_expected_init_loss_matches_monte_carlo():
    x, y = _data(n=5, d=4, seed=1)
    lbar = expected_init_loss(last_layer_gram(x, "tanh"), y)
    losses = []
    gen = torch.Generator().manual_seed(3)
    for _ in range(400):
        net = MLP(4, 64, 2, "tanh", generator=gen, dtype=F64)
        with torch.no_grad():
            losses.append(float(0.5 * ((net(x) - y) ** 2).sum()))
    t = torch.tensor(losses)
    assert abs(float(t.mean()) - lbar) <= 5 * float(t.std()) / math.sqrt(len(t))


def test_ntk_dominates_last_layer_gram_and_init_bound_holds_empirically():
    # K >= Phi Phi^T always; the Chernoff bound must fail in at most a fraction p of draws
    x, _ = _data(n=4, d=8, seed=2)
    g = last_layer_gram(x, "tanh")
    lam_g = float(torch.linalg.eigvalsh(g)[0])
    width, p = 512, 0.2
    kappa = init_lambda_min_bound(width, 4, lam_g, 1.0, p)
    assert 0 < kappa < width * lam_g
    gen = torch.Generator().manual_seed(5)
    fails = 0
    for _ in range(20):
        net = MLP(8, width, 2, "tanh", generator=gen, dtype=F64)
        k = empirical_ntk(net, x)
        with torch.no_grad():
            phi = net.features(x)
        lam_k = float(torch.linalg.eigvalsh(k)[0])
        lam_phi = float(torch.linalg.eigvalsh(phi @ phi.T)[0])
        assert lam_k >= lam_phi - 1e-9 * lam_k
        fails += lam_k <= kappa
    assert fails <= 4  # p * 20; the bound is conservative, fails is 0 in practice


def test_chernoff_rate_and_failure_probability():
    assert chernoff_rate(0.0) == 0.0 and chernoff_rate(1.0) == 1.0
    hs = [chernoff_rate(d) for d in (0.1, 0.3, 0.6, 0.9, 0.999)]
    assert hs == sorted(hs)
    # small delta: h ~ delta^2 / 2
    assert chernoff_rate(1e-3) == pytest.approx(0.5e-6, rel=1e-2)
    p = init_failure_probability(1000, 8, 0.3, 1.0, 0.5)
    assert p == pytest.approx(8 * math.exp(-chernoff_rate(0.5) * 1000 * 0.3 / 8))
    # the level-p bound is consistent with the probability at its own delta
    kappa = init_lambda_min_bound(1000, 8, 0.3, 1.0, 0.05)
    delta = 1 - kappa / (1000 * 0.3)
    assert init_failure_probability(1000, 8, 0.3, 1.0, delta) == pytest.approx(0.05, rel=1e-6)
    assert init_lambda_min_bound(10, 8, 0.3, 1.0, 0.05) == 0.0  # too narrow: no guarantee


def test_stability_bound_monotone_and_conditions_consistent():
    args = dict(n=8, lambda_gram=0.2, sup_abs=1.0, delta=0.5, init_loss=4.0)
    b = [stability_failure_bound(m, temperature=0.5, **args) for m in (10**3, 10**4, 10**5, 10**6)]
    assert b[0] == 1.0 and b[-1] < b[-2] < b[-3] and b[-1] < 0.05
    bt = [stability_failure_bound(10**5, temperature=t, **args) for t in (0.05, 0.5, 5.0)]
    assert bt[0] >= bt[1] > bt[2]
    m = min_width_for_stability(temperature=0.5, target_prob=0.1, **args)
    assert stability_failure_bound(m, temperature=0.5, **args) <= 0.1
    assert stability_failure_bound(m - 1, temperature=0.5, **args) > 0.1
    t = min_temperature_for_stability(10**5, target_prob=0.1, **args)
    assert stability_failure_bound(10**5, temperature=t * (1 + 1e-9), **args) <= 0.1 + 1e-9
    assert stability_failure_bound(10**5, temperature=t * 0.99, **args) > 0.1
    assert math.isinf(min_temperature_for_stability(100, target_prob=0.1, **args))


def test_prior_matched_weight_decay_makes_init_the_gibbs_prior():
    lam = prior_matched_weight_decay(1 / 8, 0.3)
    assert 0.3 / lam == pytest.approx(1 / 8)
    assert prior_matched_weight_decay(1.0, 0.0) == 0.0


def test_warnings_where_the_bound_does_not_apply():
    with pytest.warns(UserWarning, match="not smooth"):
        assert not bound_applies("relu")
    with pytest.warns(UserWarning, match="unbounded"):
        assert not bound_applies("softplus")
    assert bound_applies("erf")
    with pytest.warns(UserWarning, match="not smooth"):
        last_layer_gram(torch.eye(2, dtype=F64), "relu")


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: init_lambda_min_bound(0, 4, 0.1, 1.0, 0.1), "width"),
        (lambda: init_lambda_min_bound(10, 4, -0.1, 1.0, 0.1), "lambda_gram"),
        (lambda: init_lambda_min_bound(10, 4, 0.1, 1.0, 1.5), "failure_prob"),
        (lambda: stability_failure_bound(10, 4, 0.1, 1.0, 0.5, 1.0, 0.0), "temperature"),
        (lambda: stability_failure_bound(10, 4, 0.1, 1.0, 1.0, 1.0, 0.1), "delta"),
        (lambda: stability_failure_bound(10, 4, 0.1, 1.0, 0.5, -1.0, 0.1), "init_loss"),
        (lambda: prior_matched_weight_decay(0.0, 0.1), "init_var"),
        (lambda: prior_matched_weight_decay(1.0, -0.1), "temperature"),
        (lambda: chernoff_rate(1.5), "delta"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_gibbs_loss_floor_matches_brute_force_importance_sampling():
    # independent route: draw (W, a) from the init law, weight by exp(-L/T), no integration
    from langevin_ntk.bounds import gibbs_loss_floor

    x, y = _data(n=3, d=4, seed=7)
    m, temp = 5, 1.0
    r = gibbs_loss_floor(x, y, m, temp, samples=20_000, seed=1)
    g = torch.Generator().manual_seed(2)
    k = 400_000
    w = torch.randn(k, m, 4, generator=g, dtype=F64) / 2.0
    a = torch.randn(k, m, generator=g, dtype=F64) / math.sqrt(m)
    f = (torch.tanh(x @ w.mT) * a[:, None, :]).sum(-1)
    loss = 0.5 * (f - y).pow(2).sum(-1)
    lw = -loss / temp
    wts = torch.softmax(lw, 0)
    bf_floor = float((wts * loss).sum())
    bf_se = float(((wts**2) * (loss - bf_floor) ** 2).sum().sqrt())
    bf_free = -temp * float(torch.logsumexp(lw, 0) - math.log(k))
    assert abs(r["floor"] - bf_floor) <= 5 * math.hypot(r["floor_se"], bf_se)
    assert r["free_energy"] == pytest.approx(bf_free, rel=0.02)
    assert r["floor"] <= r["free_energy"]  # E_pi L <= F* (Donsker-Varadhan)
    assert r["free_energy"] <= expected_init_loss(last_layer_gram(x, "tanh"), y)  # Jensen


def test_general_weight_decay_bound_reduces_to_prior_matched_and_penalises_mismatch():
    from langevin_ntk.bounds import stability_failure_bound_wd

    x, y = _data(n=4, d=8, seed=3)
    m, temp = 200_000, 0.5
    matched = stability_failure_bound_wd(x, y, m, temp, temp * 8, temp * m)
    g = last_layer_gram(x, "tanh")
    lam = float(torch.linalg.eigvalsh(g)[0])
    ref = stability_failure_bound(m, 4, lam, 1.0, 0.5, expected_init_loss(g, y), temp)
    assert matched["kl_init"] == pytest.approx(0.0, abs=1e-9)
    assert matched["lambda_gram"] == pytest.approx(lam, rel=1e-10)
    assert matched["bound"] == pytest.approx(ref, rel=1e-10)
    # a decay 20% off the matched value pays KL ~ P (r - 1 - log r) / 2 and loses the bound
    off = stability_failure_bound_wd(x, y, m, temp, 1.2 * temp * 8, 1.2 * temp * m)
    r = 1.2  # init var / prior var = var * lambda / T
    assert off["kl_init"] == pytest.approx(0.5 * (m * 8 + m) * (r - 1 - math.log(r)), rel=1e-12)
    assert off["bound"] > matched["bound"]
    with pytest.raises(ValueError, match="weight_decay_w"):
        stability_failure_bound_wd(x, y, m, temp, 0.0, 1.0)
