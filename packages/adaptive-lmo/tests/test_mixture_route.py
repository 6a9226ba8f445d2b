"""The optimizer's mixture route (issue 33, speed): between criterion steps a layer off a = 0
takes the weighted Newton-Schulz iterates fitted on the last criterion step, when the
criterion found them within ``min_gain`` of the exact member, else the SVD."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import adaptive_lmo.controller as controller
from adaptive_lmo import AdaptiveLMO
from adaptive_lmo.fractional import fractional_update
from adaptive_lmo.mixture import mixed_member

N_IN, N_OUT, ROWS = 37, 23, 300
CANDIDATES = (3, 4, 5)


OPTIONS = dict(
    lr=1.0, momentum=0.0, update_every=3, stats="same_batch", switch_confidence=0,
    min_gain=0.01, backoff=0, head=None,
)  # fmt: skip


def _setup(**kw):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(N_IN, N_OUT, bias=False), nn.Linear(N_OUT, 1))
    return net, AdaptiveLMO(net, **{**OPTIONS, **kw}), net[0].weight


def _step(opt, w, g, spread=0.5, feed=True):
    """One step on a hand-fed gradient (ill-conditioned, so the criterion leaves a = 0) and,
    on criterion steps, hand-fed statistics; returns the gradient and the applied update."""
    P = torch.randn(N_OUT, N_IN, generator=g) * torch.logspace(0, -spread, N_IN)
    w.grad = P.clone()
    if feed:
        X = torch.randn(ROWS, N_IN, generator=g) * torch.logspace(0, -spread, N_IN)
        opt.record_activations(w, X, output_gradients=torch.randn(ROWS, N_OUT, generator=g))
    before = w.detach().clone()
    opt.step()
    return P, before - w.detach(), before


def test_between_criterion_steps_the_update_is_the_fitted_mixture():
    _, opt, w = _setup()
    g = torch.Generator().manual_seed(1)
    _step(opt, w, g)  # step 1: a criterion step (exact factors)
    geo = opt.geometry()["0.weight"]
    a = geo["exponent"]
    assert 0.0 < a < 1.0, geo["source"]
    assert geo["mixture"] and geo["mixture_loss"] < OPTIONS["min_gain"]
    weights = opt.state[w]["mixture"]
    for _ in range(2):  # steps 2 and 3: no criterion, the mixture
        P, D, W = _step(opt, w, g, feed=False)
        ref = mixed_member(P, weights, a, "polar", opt.state[w]["mixture_norm"])
        # D is read back through W - (W - D): one float32 rounding of each difference
        eps = torch.finfo(torch.float32).eps
        assert ((D - ref).abs() <= 2 * eps * (W.abs() + ref.abs())).all()
        exact = fractional_update(P.double(), a, method="svd", scale="polar")
        # the same member up to the fit and bf16 rounding (the criterion scored the loss)
        assert float((D.double() - exact).norm() / exact.norm()) < 0.2
    _step(opt, w, g)  # step 4: a criterion step again, the update from its exact factors
    assert opt.state[w]["step"] == 4


@pytest.mark.parametrize("losses", [(0.5, 0.005, 0.0), (0.002, 0.5, 0.5), (0.5, 0.5, 0.003)])
def test_the_fewest_newton_schulz_steps_that_pass_are_taken(losses, monkeypatch):
    """With candidate step counts (3, 4, 5) (the default is 5 alone, mixture.MIXTURE_STEPS),
    they are scored cheapest first and the first whose loss is below min_gain is taken (later
    ones are not scored); between criterion steps the update combines exactly that many
    Newton-Schulz steps (the weights the fit gave for them)."""
    monkeypatch.setattr(controller, "MIXTURE_STEPS", CANDIDATES)
    forced = dict(zip(CANDIDATES, losses, strict=True))
    scored = []
    real = controller.mixture_loss

    def scoring(*args, steps, **kw):
        scored.append(steps)
        return real(*args, steps=steps, **kw)[0], forced[steps]

    monkeypatch.setattr(controller, "mixture_loss", scoring)
    _, opt, w = _setup()
    g = torch.Generator().manual_seed(1)
    _step(opt, w, g)
    geo = opt.geometry()["0.weight"]
    want = next(k for k in CANDIDATES if forced[k] < OPTIONS["min_gain"])
    assert scored == [k for k in CANDIDATES if k <= want]
    assert geo["mixture"] and geo["mixture_steps"] == want and geo["mixture_loss"] == forced[want]
    weights, a = opt.state[w]["mixture"], geo["exponent"]
    assert len(weights) == want + 1
    P, D, W = _step(opt, w, g, feed=False)
    ref = mixed_member(P, weights, a, "polar", opt.state[w]["mixture_norm"])
    eps = torch.finfo(torch.float32).eps
    assert ((D - ref).abs() <= 2 * eps * (W.abs() + ref.abs())).all()


def test_no_passing_step_count_means_no_mixture(monkeypatch):
    """Every step count scored at or above min_gain: all are tried, none is used."""
    monkeypatch.setattr(controller, "MIXTURE_STEPS", CANDIDATES)
    scored = []
    monkeypatch.setattr(
        controller,
        "mixture_loss",
        lambda *a, steps, **k: (scored.append(steps), (torch.zeros(steps + 1), 0.5))[1],
    )
    _, opt, w = _setup(min_gain=0.05)
    _step(opt, w, torch.Generator().manual_seed(2), spread=0.25)
    geo = opt.geometry()["0.weight"]
    assert scored == list(CANDIDATES) and not geo["mixture"] and geo["mixture_steps"] is None


def test_rejected_mixture_keeps_the_svd(monkeypatch):
    """A mixture scored as losing min_gain or more is not used: the steps take the SVD."""
    monkeypatch.setattr(controller, "mixture_loss", lambda *a, **k: (torch.zeros(6), 0.5))
    _, opt, w = _setup(min_gain=0.05)
    g = torch.Generator().manual_seed(2)
    _step(opt, w, g, spread=0.25)
    geo = opt.geometry()["0.weight"]
    a = geo["exponent"]
    assert a > 0.0 and not geo["mixture"] and geo["mixture_loss"] == 0.5
    P, D, _ = _step(opt, w, g, feed=False)
    exact = fractional_update(P, a, method="svd", scale="polar")
    tol = 50 * max(N_IN, N_OUT) * torch.finfo(torch.float32).eps
    assert float((D - exact).norm() / exact.norm()) < tol


@pytest.mark.parametrize("what", ["svd", "float64"])
def test_exact_routes_never_mix(what):
    kw = {"method": "svd"} if what == "svd" else {}
    net, opt, w = _setup(**kw)
    if what == "float64":
        net.double()
    g = torch.Generator().manual_seed(3)
    for _ in range(3):
        scale = torch.logspace(0, -0.5, N_IN, dtype=w.dtype)
        w.grad = torch.randn(N_OUT, N_IN, generator=g, dtype=w.dtype) * scale
        X = torch.randn(ROWS, N_IN, generator=g, dtype=w.dtype) * scale
        opt.record_activations(w, X, output_gradients=torch.randn(ROWS, N_OUT, dtype=w.dtype))
        opt.step()
    geo = opt.geometry()["0.weight"]
    assert geo["exponent"] > 0.0 and not geo["mixture"] and geo["mixture_loss"] is None


def test_state_dict_round_trip_keeps_the_mixture():
    net, opt, w = _setup()
    g = torch.Generator().manual_seed(1)
    _step(opt, w, g)
    net2 = copy.deepcopy(net)
    opt2 = AdaptiveLMO(net2, **OPTIONS)
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert opt2.state[net2[0].weight]["mixture"] == opt.state[w]["mixture"]
    P = torch.randn(N_OUT, N_IN, generator=g)
    for o, p in ((opt, w), (opt2, net2[0].weight)):
        p.grad = P.clone()
        o.step()
    assert torch.equal(w, net2[0].weight)


def test_weights_are_not_reused_for_another_exponent():
    """A group switched to a fixed exponent after a choice does not reuse the weights fitted
    for the chosen one: the step is the exact member (SVD route)."""
    _, opt, w = _setup()
    g = torch.Generator().manual_seed(1)
    _step(opt, w, g)
    assert opt.geometry()["0.weight"]["mixture"]
    opt.param_groups[0]["exponent"] = 0.7
    P, D, _ = _step(opt, w, g, feed=False)
    exact = fractional_update(P, 0.7, method="svd", scale="polar")
    tol = 50 * max(N_IN, N_OUT) * torch.finfo(torch.float32).eps
    assert float((D - exact).norm() / exact.norm()) < tol
