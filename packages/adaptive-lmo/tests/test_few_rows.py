"""Output-factor statistics resting on few effective rows: the switch test, Ledoit-Wolf
shrinkage, the lr-grid edge rule, and a state_dict regression, against float64 references
written here (loops over rows, Monte Carlo, closed forms)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from adaptive_lmo import AdaptiveLMO
from adaptive_lmo.criterion import (
    choose_exponent,
    curvature_matrix,
    ledoit_wolf_shrinkage,
    moments_in_basis,
    shrink_to_identity,
    surrogate_decrease,
    switch_gain,
    t_quantile,
)
from adaptive_lmo.experiments import _common

D64 = torch.float64


def _rows(k, r, seed, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(r, r, generator=g, dtype=D64) * torch.arange(1, r + 1, dtype=D64) ** -spread
    return torch.randn(k, r, generator=g, dtype=D64) @ A.T, g


def _brute_lw(Z):
    """Ledoit-Wolf weight by its definition (loop over rows, float64)."""
    k, r = Z.shape
    S = sum(torch.outer(z, z) for z in Z) / k
    mu = torch.trace(S) / r
    delta2 = float(((S - mu * torch.eye(r, dtype=D64)) ** 2).sum())
    beta2 = float(sum(((torch.outer(z, z) - S) ** 2).sum() for z in Z)) / k**2
    return min(beta2, delta2) / delta2, S


@pytest.mark.parametrize(("k", "r", "seed"), [(37, 11, 0), (9, 23, 1), (200, 7, 2)])
def test_moments_and_ledoit_wolf_match_the_definitions(k, r, seed):
    R, g = _rows(k, 13, seed)
    Q = torch.linalg.qr(torch.randn(13, r if r <= 13 else 13, generator=g, dtype=D64))[0].T
    S, q, kk = moments_in_basis(Q, R)
    Z = R @ Q.T
    assert kk == k
    torch.testing.assert_close(S, curvature_matrix(Q, R), rtol=0, atol=0)
    torch.testing.assert_close(q, (Z**2).sum(1).pow(2).mean(), rtol=1e-12, atol=0)
    rho_ref, S_ref = _brute_lw(Z)
    torch.testing.assert_close(S, S_ref, rtol=1e-12, atol=1e-14)
    assert float(ledoit_wolf_shrinkage(S, q, k)) == pytest.approx(rho_ref, rel=1e-10)
    # float32 input: the weight is computed in float64 and agrees to float32 precision
    S32, q32, _ = moments_in_basis(Q.float(), R.float())
    assert float(ledoit_wolf_shrinkage(S32, q32, k)) == pytest.approx(rho_ref, rel=1e-4)


def test_ledoit_wolf_closed_forms_and_batches():
    k, r = 29, 17
    # one row carries everything: rho = min(1, (1 - 1/k) / (1 - 1/r))
    Z = torch.zeros(k, r, dtype=D64)
    Z[3] = torch.linspace(-1, 2, r, dtype=D64)
    S, q, _ = moments_in_basis(torch.eye(r, dtype=D64), Z)
    assert float(ledoit_wolf_shrinkage(S, q, k)) == pytest.approx(
        min(1.0, (1 - 1 / k) / (1 - 1 / r)), rel=1e-12
    )
    # kk < r rows of equal energy along orthonormal directions: min(1, r(kk-1)/(kk(r-kk)))
    for kk, r2 in ((5, 40), (3, 200), (9, 10)):
        O = torch.linalg.qr(torch.randn(r2, kk, dtype=D64))[0].T * 2.5
        S, q, _ = moments_in_basis(torch.eye(r2, dtype=D64), O)
        want = min(1.0, r2 * (kk - 1) / (kk * (r2 - kk)))
        assert float(ledoit_wolf_shrinkage(S, q, kk)) == pytest.approx(want, rel=1e-10)
    # S already the target: weight 0, and the shrunk matrix keeps its trace
    S = 3.0 * torch.eye(4, dtype=D64)
    assert float(ledoit_wolf_shrinkage(S, torch.tensor(100.0, dtype=D64), 10)) == 0.0
    Zb = torch.randn(3, 15, 6, dtype=D64)
    Sb, qb, kb = moments_in_basis(torch.eye(6, dtype=D64).expand(3, 6, 6), Zb)
    rb = ledoit_wolf_shrinkage(Sb, qb, kb)
    for e in range(3):
        assert float(rb[e]) == pytest.approx(_brute_lw(Zb[e])[0], rel=1e-10)
    Sh = shrink_to_identity(Sb, rb)
    torch.testing.assert_close(
        torch.diagonal(Sh, dim1=-2, dim2=-1).sum(-1), torch.diagonal(Sb, dim1=-2, dim2=-1).sum(-1)
    )


def test_ledoit_wolf_monte_carlo_lowers_the_error_and_vanishes_with_many_rows():
    g = torch.Generator().manual_seed(4)
    r = 12
    L = torch.randn(r, r, generator=g, dtype=D64) * torch.arange(1, r + 1, dtype=D64) ** -0.7
    Sigma = L @ L.T
    err_raw, err_lw = 0.0, 0.0
    for _ in range(300):
        Z = torch.randn(10, r, generator=g, dtype=D64) @ L.T
        S, q, k = moments_in_basis(torch.eye(r, dtype=D64), Z)
        Sh = shrink_to_identity(S, ledoit_wolf_shrinkage(S, q, k))
        err_raw += float(((S - Sigma) ** 2).sum())
        err_lw += float(((Sh - Sigma) ** 2).sum())
    assert err_lw < 0.8 * err_raw
    Z = torch.randn(20000, r, generator=g, dtype=D64) @ L.T
    S, q, k = moments_in_basis(torch.eye(r, dtype=D64), Z)
    assert float(ledoit_wolf_shrinkage(S, q, k)) < 0.01


def _population(r, seed):
    g = torch.Generator().manual_seed(seed)
    s = torch.arange(1, r + 1, dtype=D64) ** -0.8 * 3
    B = torch.randn(r, r, generator=g, dtype=D64) * torch.arange(1, r + 1, dtype=D64) ** -0.6
    A = torch.randn(r, 2 * r, generator=g, dtype=D64)
    C = A @ A.T / (2 * r) + 0.1 * torch.eye(r, dtype=D64)
    return s, B, C, g


def test_switch_gain_is_the_surrogate_log_ratio_with_the_kish_rows():
    r, k = 9, 41
    s, B, C, g = _population(r, 0)
    # heavy-tailed row scales: n_eff well below k
    Z = (torch.randn(k, r, generator=g, dtype=D64) @ B.T) * torch.rand(
        k, 1, generator=g, dtype=D64
    ).pow(4)
    d = s * (1 + 0.2 * torch.rand(r, generator=g, dtype=D64))
    M = curvature_matrix(torch.eye(r, dtype=D64), Z) * C
    for a_new, a_old in ((0.9, 0.1), (0.0, 0.55), (0.3, 0.31)):
        gain, se, n_eff = switch_gain(a_new, a_old, s, Z, C, d)
        ref = math.log(float(surrogate_decrease(a_new, s, M, d))) - math.log(
            float(surrogate_decrease(a_old, s, M, d))
        )
        assert gain == pytest.approx(ref, rel=1e-9, abs=1e-12)
        # the per-row terms, the delta-method error and Kish's n_eff by hand
        f = {a: torch.stack([(z * s**a) @ C @ (z * s**a) for z in Z]) for a in (a_new, a_old)}
        h = f[a_new] / f[a_new].mean() - f[a_old] / f[a_old].mean()
        assert se == pytest.approx(math.sqrt(float((h**2).sum()) / (k * (k - 1))), rel=1e-9)
        kish = min(float(f[a].sum() ** 2 / (f[a] ** 2).sum()) for a in (a_new, a_old))
        assert n_eff == pytest.approx(kish, rel=1e-9)
        assert 1.0 <= n_eff < k
    # equal rows: n_eff = k, error 0; one nonzero row: n_eff = 1
    same = Z[:1].expand(k, r).clone()
    _, se, n_eff = switch_gain(0.8, 0.2, s, same, C)
    assert n_eff == pytest.approx(k, rel=1e-12) and se == pytest.approx(0.0, abs=1e-12)
    one = torch.zeros(k, r, dtype=D64)
    one[7] = Z[0]
    assert switch_gain(0.8, 0.2, s, one, C)[2] == pytest.approx(1.0, rel=1e-12)
    # nothing resolved (all rows zero): NaN gain, n_eff 0
    gain, se, n_eff = switch_gain(0.8, 0.2, s, torch.zeros(k, r, dtype=D64), C)
    assert math.isnan(gain) and math.isnan(se) and n_eff == 0.0


def test_spectrum_gain_scores_any_spectrum_and_is_switch_gain_on_members():
    """Any two spectra (Newton-Schulz's map against the exact polar factor's ones): the
    surrogate's log ratio by :func:`weighted_decrease`, the delta-method error and Kish's
    rows by loops here; on the family's members it is :func:`switch_gain` to the bit."""
    from adaptive_lmo.criterion import spectrum_gain, weighted_decrease
    from adaptive_lmo.fractional import ns_spectrum

    r, k = 11, 53
    s, B, C, g = _population(r, 3)
    Z = (torch.randn(k, r, generator=g, dtype=D64) @ B.T) * (1 + torch.rand(k, 1, generator=g))
    d = s * (1 + 0.3 * torch.rand(r, generator=g, dtype=D64))
    M = curvature_matrix(torch.eye(r, dtype=D64), Z) * C
    ones, ns = torch.ones(r, dtype=D64), ns_spectrum(s)
    assert float((ns - ones).abs().max()) > 0.1  # the two spectra differ
    gain, se, n_eff = spectrum_gain(ones, ns, s, Z, C, d)
    dec = weighted_decrease(torch.stack([ones, ns]), s, M, d)
    assert gain == pytest.approx(math.log(float(dec[0] / dec[1])), rel=1e-9, abs=1e-12)
    f = {i: torch.stack([(z * w) @ C @ (z * w) for z in Z]) for i, w in enumerate((ones, ns))}
    h = f[0] / f[0].mean() - f[1] / f[1].mean()
    assert se == pytest.approx(math.sqrt(float((h**2).sum()) / (k * (k - 1))), rel=1e-9)
    kish = min(float(f[i].sum() ** 2 / (f[i] ** 2).sum()) for i in (0, 1))
    assert n_eff == pytest.approx(kish, rel=1e-9)
    # scale invariance: the gain compares directions, not lengths
    g2 = spectrum_gain(3.0 * ones, 0.5 * ns, s, Z, C, d)
    assert g2[0] == pytest.approx(gain, rel=1e-12) and g2[1] == pytest.approx(se, rel=1e-9)
    top = s / s.max()
    for a_new, a_old in ((0.9, 0.1), (0.0, 0.55)):
        assert spectrum_gain(top.pow(a_new), top.pow(a_old), s, Z, C, d) == switch_gain(
            a_new, a_old, s, Z, C, d
        )


def test_switch_gain_error_matches_monte_carlo_over_row_draws():
    r, k, reps = 7, 300, 400
    s, B, C, g = _population(r, 1)
    gains, ses = [], []
    for _ in range(reps):
        Z = torch.randn(k, r, generator=g, dtype=D64) @ B.T
        gain, se, _ = switch_gain(0.75, 0.15, s, Z, C)
        gains.append(gain)
        ses.append(se)
    sd = torch.tensor(gains).std().item()
    assert sum(ses) / len(ses) == pytest.approx(sd, rel=0.15)


def test_t_quantile_closed_forms():
    assert t_quantile(0.975, 1) == pytest.approx(math.tan(math.pi * 0.475), rel=1e-5)
    q = 0.975  # df = 2: (2q - 1) / sqrt(2 q (1 - q))
    assert t_quantile(q, 2) == pytest.approx((2 * q - 1) / math.sqrt(2 * q * (1 - q)), rel=1e-5)


def _linear_net(n, m, seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(n, m, bias=False).double(), nn.Linear(m, 1).double())


def _choose_by_hand(P, X, Gout):
    U, s, Vh = torch.linalg.svd(P, full_matrices=False)
    Z = Gout @ U
    C = curvature_matrix(Vh, X)
    M = curvature_matrix(U.T, Gout) * C
    return choose_exponent(s, M), s, Z, C


@pytest.mark.parametrize("conf", [0.975, 0.0])
def test_optimizer_applies_the_switch_rule_exactly(conf):
    """Output rows fed by hand; every choice equals the stated rule recomputed in float64."""
    n, m, N = 13, 10, 40
    net = _linear_net(n, m, 3)
    w = net[0].weight
    opt = AdaptiveLMO(
        net, lr=0.01, momentum=0.0, update_every=1, stats="same_batch", switch_confidence=conf,
        backoff=0,
    )  # fmt: skip
    g = torch.Generator().manual_seed(11)
    prev, kept, moved, tested = None, 0, 0, 0
    for t in range(14):
        X = torch.randn(N, n, generator=g, dtype=D64)
        Gout = torch.randn(N, m, generator=g, dtype=D64) * torch.linspace(0.2, 2, m, dtype=D64)
        if t % 2:  # every other step a few rows carry the output factor
            Gout = Gout * torch.rand(N, 1, generator=g, dtype=D64).pow(12)
        P = torch.randn(m, n, generator=g, dtype=D64) * torch.linspace(3, 0.1, n, dtype=D64)
        w.grad = P.clone()
        opt.record_activations(w, X, output_gradients=Gout)
        opt.step()
        geo = opt.geometry()["0.weight"]
        a_new, s, Z, C = _choose_by_hand(P, X, Gout)
        if prev is None or a_new == prev or conf == 0:
            want = a_new
        else:
            gain, se, n_eff = switch_gain(a_new, prev, s, Z, C)
            if n_eff >= m:
                want = a_new
            else:
                tested += 1
                df = math.floor(n_eff) - 1
                thr = t_quantile(conf, df) * se if df >= 1 else math.inf
                want = a_new if gain > thr else prev
        assert geo["exponent"] == pytest.approx(want, abs=1e-9)
        if prev is not None and want == prev and a_new != prev:
            kept += 1
            assert geo["source"].startswith("kept: a = ")
        elif prev is not None and want != prev:
            moved += 1
        prev = geo["exponent"]
    if conf > 0:  # both branches were exercised
        assert tested >= 4 and kept >= 1 and moved >= 1
    else:
        assert kept == 0 and moved >= 4


def test_ledoit_wolf_option_scores_the_shrunk_factor():
    n, m, N = 9, 12, 30
    net = _linear_net(n, m, 5)
    w = net[0].weight
    opt = AdaptiveLMO(
        net, lr=0.01, update_every=1, stats="same_batch", shrinkage="ledoit_wolf",
        switch_confidence=0.0,
    )  # fmt: skip
    g = torch.Generator().manual_seed(2)
    X = torch.randn(N, n, generator=g, dtype=D64)
    Gout = torch.randn(N, m, generator=g, dtype=D64) * torch.rand(N, 1, generator=g, dtype=D64)
    P = torch.randn(m, n, generator=g, dtype=D64)
    w.grad = P.clone()
    opt.record_activations(w, X, output_gradients=Gout)
    opt.step()
    U, s, Vh = torch.linalg.svd(P, full_matrices=False)
    rho, S = _brute_lw(Gout @ U)
    Sh = (1 - rho) * S + rho * torch.trace(S) / S.shape[0] * torch.eye(S.shape[0], dtype=D64)
    geo = opt.geometry()["0.weight"]
    assert geo["output_shrinkage"] == pytest.approx(rho, rel=1e-9)
    assert 0.0 < rho < 1.0
    want = choose_exponent(s, Sh * curvature_matrix(Vh, X))
    assert geo["exponent"] == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"shrinkage": "oas"}, "shrinkage"), ({"switch_confidence": 0.3}, "switch_confidence")],
)
def test_bad_few_rows_options_raise(kw, match):
    with pytest.raises(ValueError, match=match):
        AdaptiveLMO(_linear_net(3, 4, 0), **kw)


def test_load_state_dict_keeps_source_strings():
    net = _linear_net(5, 6, 1)
    opt = AdaptiveLMO(net, lr=0.01, update_every=1)
    x = torch.randn(16, 5, dtype=D64)
    for _ in range(3):
        opt.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step()
    src = opt.geometry()["0.weight"]["source"]
    opt2 = AdaptiveLMO(net, lr=0.01, update_every=1)
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert opt2.geometry()["0.weight"]["source"] == src and isinstance(src, str)


def test_sweep_extends_a_grid_at_its_edge_until_the_pick_is_interior():
    # validation score peaks at lr = 0.004 (log-quadratic): below the grid [0.01, 0.03, 0.09]
    def train_one(o, lr, seed):
        v = -((math.log(lr) - math.log(0.004)) ** 2)
        return _common.RunOutput(v, v, [])

    grids = {"A": [0.01, 0.03, 0.09], "B": [0.003, 0.004, 0.005], "C": [0.1]}
    res = _common.sweep(train_one, grids, 2, higher_is_better=True, desc="t", extend=3)
    # one point per step at the grid's own ratio 3: 0.00333, then 0.00111 (interior pick)
    assert res.grids["A"] == [0.00111, 0.00333, 0.01, 0.03, 0.09]
    assert res.best_lr["A"] == 0.00333 and len(res.runs["A"][0.00111]) == 2
    assert res.grids["B"] == [0.003, 0.004, 0.005] and res.grids["C"] == [0.1]
    assert _common.grid_edges(res, res.grids) == []
    capped = _common.sweep(train_one, grids, 1, higher_is_better=True, desc="t", extend=1)
    assert capped.grids["A"] == [0.00333, 0.01, 0.03, 0.09]
    assert _common.grid_edges(capped, capped.grids) == ["A (bottom of its grid)"]
    none = _common.sweep(train_one, grids, 1, higher_is_better=True, desc="t")
    assert none.grids["A"] == [0.01, 0.03, 0.09]
