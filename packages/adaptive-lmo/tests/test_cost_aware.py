"""The cost-aware rules (issue 33, overhead): ``min_gain`` and the criterion ``backoff``.

``min_gain``: on the default route a layer leaves a = 0 only when the surrogate, recomputed
here in float64 from the optimizer's own statistics, predicts at least that relative gain in
one-step decrease. ``backoff``: the schedule of criterion steps, checked step by step against
the stated rule (spacing ``update_every * 2**min(j, backoff)``, j stable choices in a row).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import adaptive_lmo.controller as controller
from adaptive_lmo import AdaptiveLMO
from adaptive_lmo.criterion import choose_exponent, curvature_matrix, surrogate_decrease


def _layer(n: int, m: int, seed: int) -> tuple[nn.Sequential, torch.Tensor]:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(n, m, bias=False), nn.Linear(m, 1))
    return net, net[0].weight


def _feed(opt, w, g, n, m, N, spread):
    """One step on hand-fed statistics; returns what the criterion saw (float64)."""
    X = torch.randn(N, n, generator=g) * torch.logspace(0, -spread, n)
    Gout = torch.randn(N, m, generator=g)
    P = torch.randn(m, n, generator=g) * torch.logspace(0, -spread, n)
    w.grad = P.clone()
    opt.record_activations(w, X, output_gradients=Gout)
    opt.step()
    return P.double(), X.double(), Gout.double()


def _by_hand(P, X, Gout):
    U, s, Vh = torch.linalg.svd(P, full_matrices=False)
    M = curvature_matrix(U.T, Gout) * curvature_matrix(Vh, X)
    a = choose_exponent(s, M)
    dec = surrogate_decrease(torch.tensor([a, 0.0], dtype=torch.float64), s, M)
    return a, float(dec[0] / dec[1]) - 1.0


@pytest.mark.parametrize("min_gain", [0.0, 0.05, 10.0])
def test_min_gain_sends_small_predicted_gains_to_a0(min_gain, monkeypatch):
    """float32 layer, same-batch statistics, a choice every step: the exponent is the
    criterion's where its predicted gain reaches min_gain, else exactly 0 (here no
    Newton-Schulz mixture is accepted, so a layer off 0 would pay an SVD per step)."""
    monkeypatch.setattr(controller, "mixture_loss", lambda *a, **k: (None, math.inf))
    n, m, N = 19, 13, 200  # N < max_rows: the sketch keeps every row
    net, w = _layer(n, m, 0)
    opt = AdaptiveLMO(
        net, lr=0.0, momentum=0.0, update_every=1, stats="same_batch", switch_confidence=0,
        min_gain=min_gain, backoff=0, head=None,
    )  # fmt: skip
    g = torch.Generator().manual_seed(1)
    kept = zeroed = 0
    for t in range(8):
        P, X, Gout = _feed(opt, w, g, n, m, N, spread=0.3 * t)  # gains from ~0 to large
        a, gain = _by_hand(P, X, Gout)
        geo = opt.geometry()["0.weight"]
        # float32 statistics against float64 ones: the exponent to a grid step (1/128)
        if a > 0 and gain >= min_gain * 1.02:
            assert geo["exponent"] == pytest.approx(a, abs=1 / 64)
            kept += 1
        elif a == 0 or gain < min_gain * 0.98:
            assert geo["exponent"] == 0.0
            zeroed += min_gain > 0 and a > 0
            if a > 0:
                assert "min_gain" in geo["source"]
    if min_gain == 0.0:
        assert kept >= 4  # the data do move the exponent off 0
    if min_gain == 10.0:
        assert zeroed >= 4 and kept == 0


@pytest.mark.parametrize("mix_loss", [0.01, 0.2])
def test_gain_below_min_gain_stands_on_an_accepted_mixture(mix_loss, monkeypatch):
    """With min_gain = 0.05 and the mixture scored at ``mix_loss``: an exponent whose
    predicted gain (switch_confidence 0: the point estimate, recomputed here in float64) is
    below min_gain stands exactly when the mixture is accepted (loss < min_gain) and keeps
    a positive realised gain, (1 + gain)(1 - loss) > 1; else a = 0."""
    monkeypatch.setattr(controller, "mixture_loss", lambda *a, **k: (torch.zeros(6), mix_loss))
    n, m, N = 19, 13, 200
    net, w = _layer(n, m, 0)
    opt = AdaptiveLMO(
        net, lr=0.0, momentum=0.0, update_every=1, stats="same_batch", switch_confidence=0,
        min_gain=0.05, backoff=0, head=None,
    )  # fmt: skip
    g = torch.Generator().manual_seed(1)
    kept_small = zeroed_small = 0
    for t in range(14):  # spreads where the predicted gains are ~0-3% (measured)
        P, X, Gout = _feed(opt, w, g, n, m, N, spread=0.75 + 0.025 * t)
        a, gain = _by_hand(P, X, Gout)
        geo = opt.geometry()["0.weight"]
        if a == 0 or not 0.002 < gain < 0.048:  # the small-gain band, off its edges
            continue
        keeps = mix_loss < 0.05 and (1 + gain) * (1 - mix_loss) > 1
        if abs((1 + gain) * (1 - mix_loss) - 1) < 2e-3:
            continue  # within float32 statistics' reach of the boundary
        if keeps:
            assert geo["exponent"] == pytest.approx(a, abs=1 / 64)
            assert "mixture" in geo["source"] and geo["mixture"]
            kept_small += 1
        else:
            assert geo["exponent"] == 0.0
            zeroed_small += 1
    assert kept_small + zeroed_small >= 5  # the band was visited
    if mix_loss >= 0.05:
        assert kept_small == 0


def test_min_gain_is_inert_on_the_exact_routes():
    """method="svd" (a = 0 costs an SVD too) and float64 layers ignore min_gain."""
    n, m, N = 19, 13, 200
    for method, dtype in (("svd", torch.float32), ("auto", torch.float64)):
        net, _ = _layer(n, m, 0)
        net = net.to(dtype)
        w = net[0].weight
        opt = AdaptiveLMO(
            net, lr=0.0, momentum=0.0, update_every=1, stats="same_batch",
            switch_confidence=0, min_gain=1e6, method=method, backoff=0, head=None,
        )  # fmt: skip
        g = torch.Generator().manual_seed(1)
        moved = 0
        for t in range(8):
            X = torch.randn(N, n, generator=g) * torch.logspace(0, -0.3 * t, n)
            Gout = torch.randn(N, m, generator=g)
            P = torch.randn(m, n, generator=g) * torch.logspace(0, -0.3 * t, n)
            w.grad = P.to(dtype)
            opt.record_activations(w, X.to(dtype), output_gradients=Gout.to(dtype))
            opt.step()
            a, _ = _by_hand(P.double(), X.double(), Gout.double())
            assert opt.geometry()["0.weight"]["exponent"] == pytest.approx(a, abs=1 / 64)
            moved += a > 0.05
        assert moved >= 3


@pytest.mark.parametrize("stats", ["same_batch", "next_batch"])
def test_backoff_spacing_follows_the_stated_rule(stats):
    """A layer whose choice stays at a = 0: criterion steps at 1, 1+k, 1+3k, 1+7k, then every
    8k (backoff=3); the snapshot steps are read from the optimizer's hooks (``fisher_due``
    for same_batch, the kept factors for next_batch)."""
    k, n, m = 3, 8, 6
    net, w = _layer(n, m, 4)
    opt = AdaptiveLMO(
        net, lr=0.0, momentum=0.0, update_every=k, stats=stats, min_gain=1e6, backoff=3,
        head=None,
    )  # fmt: skip
    g = torch.Generator().manual_seed(5)
    snaps = []
    for t in range(1, 90):
        _feed(opt, w, g, n, m, 50, spread=1.0)
        if opt.state[w]["last_snap"] == t:  # this step took the criterion's decomposition
            snaps.append(t)
    # the first choice has nothing to be stable against (j = 0 after it), then j = 1, 2, ...
    want, t = [], 1
    while t < 90:  # the i-th choice (from 0) is the i-th stable one in a row
        want.append(t)
        t += k * 2 ** min(len(want) - 1, 3)
    assert want[:6] == [1, 4, 10, 22, 46, 70]
    assert snaps == want
    assert opt.geometry()["0.weight"]["exponent"] == 0.0


def test_backoff_resets_when_the_choice_moves():
    """Stable choices stretch the spacing; a choice that moves the exponent resets it to k."""
    k, n, m, N = 2, 10, 7, 300
    net, w = _layer(n, m, 6)
    opt = AdaptiveLMO(
        net, lr=0.0, momentum=0.0, update_every=k, stats="same_batch", switch_confidence=0,
        min_gain=0.0, backoff=2, head=None,
    )  # fmt: skip
    g = torch.Generator().manual_seed(7)
    for _ in range(12):  # flat spectra: a = 0 every time, the spacing grows to 4k
        _feed(opt, w, g, n, m, N, spread=0.0)
    assert opt.state[w]["stable"] >= 2
    before, moved = opt.geometry()["0.weight"]["exponent"], False
    for _ in range(4 * k + 1):  # steep spectra: the next choice moves off 0
        _feed(opt, w, g, n, m, N, spread=3.0)
        if opt.geometry()["0.weight"]["exponent"] != before:
            moved = True
            assert opt.state[w]["stable"] == 0
            assert opt.state[w]["next_snap"] - opt.state[w]["last_snap"] == k
            break
    assert moved


@pytest.mark.parametrize("method", ["auto", "svd"])
def test_backoff_counts_moves_below_min_gain_as_stable(method, monkeypatch):
    """Default route, off a = 0: a move of the exponent by more than a grid step counts as
    stable (the spacing keeps growing) exactly when the surrogate, recomputed here in float64
    from the fed statistics, predicts decreases of the old and new exponent within
    ``min_gain`` of each other; a route change (to or from a = 0) always resets. On
    ``method="svd"`` (no SVD to price) every such move resets. The cost rule is switched off
    so that small exponents stay off 0 and both outcomes occur."""
    monkeypatch.setattr(controller.ExponentController, "_cost_rule", lambda self, *a: "")
    n, m, N, mg = 19, 13, 200, 0.015
    net, w = _layer(n, m, 3)
    opt = AdaptiveLMO(
        net, lr=0.0, momentum=0.0, update_every=1, stats="same_batch", switch_confidence=0,
        min_gain=mg, backoff=0, head=None, method=method,
    )  # fmt: skip
    g = torch.Generator().manual_seed(3)
    old, below, above = None, 0, 0
    for _ in range(80):
        spread = 0.5 + 2.5 * float(torch.rand(1, generator=g))  # a moves between 0 and ~0.4
        before = opt.state[w].get("stable", 0)
        P, X, Gout = _feed(opt, w, g, n, m, N, spread)
        new, stable = opt.state[w]["exponent"], opt.state[w]["stable"]
        if old is not None:
            if (old == 0.0) != (new == 0.0):
                assert stable == 0
            elif new == 0.0 or abs(new - old) <= 1 / 128:
                assert stable == before + 1
            else:
                U, s, Vh = torch.linalg.svd(P, full_matrices=False)
                M = curvature_matrix(U.T, Gout) * curvature_matrix(Vh, X)
                dec = surrogate_decrease(torch.tensor([new, old], dtype=torch.float64), s, M)
                change = abs(float(dec[0] / dec[1]) - 1.0)
                if abs(change - mg) > 2e-3:  # off float32 statistics' reach of the boundary
                    priced = change < mg and method == "auto"
                    assert stable == (before + 1 if priced else 0)
                    below += change < mg
                    above += change >= mg
        old = new
    assert below >= 1 and above >= 1  # both sides of min_gain were decided


def test_options_validated():
    net, _ = _layer(4, 3, 0)
    for bad in ({"min_gain": -0.1}, {"min_gain": float("nan")}, {"backoff": -1},
                {"backoff": 1.5}, {"backoff": True}):  # fmt: skip
        with pytest.raises(ValueError, match=next(iter(bad))):
            AdaptiveLMO(net, **bad)
