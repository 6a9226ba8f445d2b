"""AdaptiveLMO: the four corners against torch references, routing, hooks, state, bad input."""

from __future__ import annotations

import copy
import gc
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from _synthetic import best_step_decrease, grad, problem
from torch import nn

from adaptive_lmo import AdaptiveLMO, fractional_update
from adaptive_lmo.criterion import choose_exponent, curvature_along
from adaptive_lmo.fractional import svd_factors
from shared_core.polar import msign

STEPS = 6


def _mlp(seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(7, 13),
        nn.Tanh(),
        nn.Linear(13, 9),
        nn.Tanh(),
        nn.Linear(9, 11),
        nn.Tanh(),
        nn.Linear(11, 3),
    ).to(dtype)


def _batches(n=STEPS, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(17, 7, generator=g, dtype=dtype), torch.randn(17, 3, generator=g, dtype=dtype))
        for _ in range(n)
    ]


def _train(model, opt, batches):
    for x, y in batches:
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()


def _matrices(model):
    return [model[0].weight, model[2].weight, model[4].weight]


def _close(m1, m2, rtol=1e-6):
    for p, q in zip(m1.parameters(), m2.parameters(), strict=True):
        err = float((p - q).detach().norm() / q.detach().norm().clamp_min(1e-30))
        assert err < rtol, err


def _split(model):
    mats = {id(p) for p in _matrices(model)}
    return [p for p in model.parameters() if id(p) in mats], [
        p for p in model.parameters() if id(p) not in mats
    ]


def _ref_adamw(params):
    # AdaptiveLMO's AdamW side keeps the suite's betas (shared_core.routing.AUX_ADAMW)
    return torch.optim.AdamW(params, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)


@pytest.mark.parametrize("nesterov", [False, True])
def test_corner_sgd(nesterov):
    a, b = _mlp(), _mlp()
    opt = AdaptiveLMO(
        a,
        lr=0.05,
        momentum=0.9,
        nesterov=nesterov,
        exponent=1.0,
        scale="none",
        adamw_lr=3e-3,
        adjust_lr_fn="unit",
    )
    mats, rest = _split(b)
    ref = [torch.optim.SGD(mats, lr=0.05, momentum=0.9, nesterov=nesterov), _ref_adamw(rest)]
    for x, y in _batches():
        opt.zero_grad()
        for r in ref:
            r.zero_grad()
        F.mse_loss(a(x), y).backward()
        F.mse_loss(b(x), y).backward()
        opt.step()
        for r in ref:
            r.step()
    _close(a, b)


def _muon_reference(params, lr, mu, nesterov, wd, steps_grads):
    """Muon with the exact polar factor: B = mu B + g; W <- (1 - lr wd) W - lr msign(.)."""
    bufs = [torch.zeros_like(p) for p in params]
    for grads in steps_grads:
        for p, g, B in zip(params, grads, bufs, strict=True):
            B.mul_(mu).add_(g)
            d = g + mu * B if nesterov else B
            p.mul_(1 - lr * wd).sub_(lr * msign(d, method="svd"))


def test_corner_muon_against_exact_polar_reference():
    a, b = _mlp(), _mlp()
    opt = AdaptiveLMO(
        a,
        lr=0.03,
        momentum=0.9,
        exponent=0.0,
        weight_decay=0.1,
        adamw_lr=3e-3,
        method="svd",
        adjust_lr_fn="unit",
    )
    mats, rest = _split(b)
    ad = _ref_adamw(rest)
    bufs = [torch.zeros_like(p) for p in mats]
    for x, y in _batches():
        opt.zero_grad()
        ad.zero_grad()
        for p in mats:
            p.grad = None
        F.mse_loss(a(x), y).backward()
        F.mse_loss(b(x), y).backward()
        opt.step()
        ad.step()
        with torch.no_grad():
            for p, B in zip(mats, bufs, strict=True):
                B.mul_(0.9).add_(p.grad)
                p.mul_(1 - 0.03 * 0.1).sub_(0.03 * msign(p.grad + 0.9 * B, method="svd"))
    _close(a, b)


def test_corner_muon_equals_torch_muon_with_exact_polar(monkeypatch):
    import torch.optim._muon as tm

    monkeypatch.setattr(tm, "_zeropower_via_newtonschulz", lambda g, *a: msign(g, method="svd"))
    a, b = _mlp(), _mlp()
    opt = AdaptiveLMO(
        a,
        lr=0.03,
        momentum=0.95,
        exponent=0.0,
        adjust_lr_fn="original",
        weight_decay=0.05,
        adamw_lr=3e-3,
    )
    mats, rest = _split(b)
    ref = [torch.optim.Muon(mats, lr=0.03, momentum=0.95, weight_decay=0.05), _ref_adamw(rest)]
    for x, y in _batches():
        opt.zero_grad()
        for r in ref:
            r.zero_grad()
        F.mse_loss(a(x), y).backward()
        F.mse_loss(b(x), y).backward()
        opt.step()
        for r in ref:
            r.step()
    _close(a, b)


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_corner_adam(wd):
    a, b = _mlp(), _mlp()
    opt = AdaptiveLMO(
        a,
        lr=1e-2,
        momentum=0.9,
        beta2=0.99,
        adjust_lr_fn="unit",
        eps=1e-8,
        precondition="adam",
        exponent=1.0,
        scale="none",
        weight_decay=wd,
        adamw_lr=3e-3,
    )
    mats, rest = _split(b)
    cls = torch.optim.AdamW if wd else torch.optim.Adam
    ref = [cls(mats, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=wd), _ref_adamw(rest)]
    for x, y in _batches():
        opt.zero_grad()
        for r in ref:
            r.zero_grad()
        F.mse_loss(a(x), y).backward()
        F.mse_loss(b(x), y).backward()
        opt.step()
        for r in ref:
            r.step()
    _close(a, b)


def test_corner_muadam_matches_its_definition():
    """MuAdam: W <- W - lr msign(m_hat / (sqrt(v_hat) + eps)), Adam's moments."""
    a, b = _mlp(), _mlp()
    opt = AdaptiveLMO(
        a,
        lr=0.02,
        momentum=0.9,
        beta2=0.99,
        precondition="adam",
        exponent=0.0,
        adamw_lr=3e-3,
        adjust_lr_fn="unit",
    )
    mats, rest = _split(b)
    ad = _ref_adamw(rest)
    ms = [torch.zeros_like(p) for p in mats]
    vs = [torch.zeros_like(p) for p in mats]
    for t, (x, y) in enumerate(_batches(), start=1):
        opt.zero_grad()
        ad.zero_grad()
        for p in mats:
            p.grad = None
        F.mse_loss(a(x), y).backward()
        F.mse_loss(b(x), y).backward()
        opt.step()
        ad.step()
        with torch.no_grad():
            for p, m, v in zip(mats, ms, vs, strict=True):
                m.mul_(0.9).add_(0.1 * p.grad)
                v.mul_(0.99).add_(0.01 * p.grad**2)
                P = (m / (1 - 0.9**t)) / ((v / (1 - 0.99**t)).sqrt() + 1e-8)
                p.sub_(0.02 * msign(P, method="svd"))
    _close(a, b)


def test_adaptive_interior_step_is_the_fractional_power():
    a, b = _mlp(), _mlp()
    opt = AdaptiveLMO(a, lr=0.03, momentum=0.0, exponent=0.4, adamw_lr=3e-3, adjust_lr_fn="unit")
    x, y = _batches(1)[0]
    F.mse_loss(a(x), y).backward()
    F.mse_loss(b(x), y).backward()
    opt.step()
    with torch.no_grad():
        W = b[2].weight
        want = W - 0.03 * fractional_update(W.grad, 0.4, scale="polar")
    torch.testing.assert_close(a[2].weight, want, rtol=1e-12, atol=1e-14)
    assert opt.geometry()["2.weight"]["exponent"] == 0.4


def test_criterion_in_the_optimizer_picks_the_grid_best_exponent():
    X, Y, W0 = problem(20, 30, 600, 1.0, 0)
    lin = nn.Linear(30, 20, bias=False).double()
    with torch.no_grad():
        lin.weight.copy_(W0)
    opt = AdaptiveLMO(
        lin,
        lr=0.1,
        momentum=0.0,
        head=None,
        max_rows=1000,
        scale="none",
        stats="same_batch",
        curvature="input",  # the squared-loss surrogate this test derives by hand
    )
    opt.zero_grad()
    (0.5 * ((lin(X) - Y) ** 2).sum() / X.shape[0]).backward()
    G = lin.weight.grad.clone()
    torch.testing.assert_close(G, grad(X, Y, W0))
    opt.step()
    a = opt.geometry()["weight"]["exponent"]
    grid = [i / 100 for i in range(101)]
    f = svd_factors(G)
    dec = [
        best_step_decrease(X, Y, W0, fractional_update(G, b, scale="none", factors=f)) for b in grid
    ]
    best = grid[max(range(101), key=dec.__getitem__)]
    assert abs(a - best) <= 0.01
    assert a == pytest.approx(choose_exponent(f.s, curvature_along(f.Vh, X)), abs=1e-12)


@pytest.mark.parametrize("stats", ["same_batch", "next_batch"])
def test_update_every_controls_when_the_exponent_moves(stats):
    m = _mlp()
    # input curvature: its choices move from step to step here (kfac stays at 0 on this MLP);
    # backoff=0: every choice k steps apart (here some moves cost less than min_gain, which
    # the backoff counts as stable, test_cost_aware.py)
    opt = AdaptiveLMO(m, lr=0.02, update_every=3, stats=stats, curvature="input", backoff=0)
    seen = []
    for x, y in _batches(8):
        opt.zero_grad()
        F.mse_loss(m(x), y).backward()
        opt.step()
        seen.append(opt.geometry()["2.weight"]["exponent"])
    if stats == "next_batch":  # fallback on step 1, chosen on steps 2, 5, 8
        assert seen[0] == 0.0 and seen[1] == seen[2] == seen[3] and seen[4] == seen[5] == seen[6]
        assert seen[3] != seen[4] and seen[6] != seen[7]
    else:  # chosen on steps 1, 4, 7
        assert seen[0] == seen[1] == seen[2] and seen[3] == seen[4] == seen[5]
        assert seen[2] != seen[3] and seen[5] != seen[6]
    assert all(0.0 <= s <= 1.0 for s in seen)


def test_routing_defaults_and_overrides():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 6)
            self.norm = nn.LayerNorm(6)
            self.body = nn.Linear(6, 6)
            self.conv = nn.Conv1d(6, 6, 3)
            self.out = nn.Linear(6, 10, bias=False)

    net = Net()
    r = AdaptiveLMO(net).routing()
    assert r["body.weight"] == "lmo" and r["conv.weight"] == "lmo"
    assert r["emb.weight"] == r["norm.weight"] == r["body.bias"] == r["out.weight"] == "adamw"
    assert AdaptiveLMO(net, head=None).routing()["out.weight"] == "lmo"
    r2 = AdaptiveLMO(net, route=lambda n, p, m: "adamw" if n == "body.weight" else None).routing()
    assert r2["body.weight"] == "adamw"
    net.out.weight = net.emb.weight  # tied head: stays with the embedding on AdamW
    assert AdaptiveLMO(net, head=None).routing()["emb.weight"] == "adamw"
    geo = AdaptiveLMO(net).geometry()
    assert geo["conv.weight"]["matrix_shape"] == (6, 18)


def test_hooks_removed_when_optimizer_is_deleted():
    m = _mlp()
    opt = AdaptiveLMO(m)
    assert len(m[0]._forward_hooks) == 1
    del opt
    gc.collect()
    assert all(len(mod._forward_hooks) == 0 for mod in m.modules())
    opt = AdaptiveLMO(m)
    opt.remove_hooks()
    assert all(len(mod._forward_hooks) == 0 for mod in m.modules())
    opt.remove_hooks()  # idempotent


@pytest.mark.parametrize("precondition", [None, "adam"])
def test_state_dict_round_trip_continues_identically(precondition):
    batches = _batches(9)
    ref = _mlp()
    opt = AdaptiveLMO(ref, lr=0.02, update_every=2, precondition=precondition, max_rows=8)
    _train(ref, opt, batches)

    a = _mlp()
    oa = AdaptiveLMO(a, lr=0.02, update_every=2, precondition=precondition, max_rows=8)
    _train(a, oa, batches[:4])
    sd = copy.deepcopy(oa.state_dict())
    ma = copy.deepcopy(a.state_dict())
    b = _mlp(seed=5)
    b.load_state_dict(ma)
    ob = AdaptiveLMO(b, lr=0.5, update_every=2, precondition=precondition, max_rows=8)
    ob.load_state_dict(sd)
    _train(b, ob, batches[4:])
    for p, q in zip(b.parameters(), ref.parameters(), strict=True):
        assert torch.equal(p, q)
    assert ob.geometry() == opt.geometry()
    # the criterion schedule (backoff) resumes too
    keys = ("last_snap", "next_snap", "stable")
    sched = [{k: ob.state[p].get(k) for k in keys} for p in b.parameters() if p in ob.state]
    want = [{k: opt.state[p].get(k) for k in keys} for p in ref.parameters() if p in opt.state]
    assert sched == want and any(s["next_snap"] is not None for s in sched)


def test_conv_reshape_rule_matches_the_convolution():
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 5, (3, 2), stride=(2, 1), padding=(1, 0), bias=False).double()
    x = torch.randn(4, 3, 9, 7, dtype=torch.float64)
    from adaptive_lmo.stats import feature_fn_for

    X = feature_fn_for(conv)(conv, x, 10**6)
    out = conv(x).permute(0, 2, 3, 1).reshape(-1, 5)
    torch.testing.assert_close(X @ conv.weight.reshape(5, -1).T, out)
    c1 = nn.Conv1d(3, 4, 3, padding=1, bias=False).double()
    x1 = torch.randn(2, 3, 8, dtype=torch.float64)
    X1 = feature_fn_for(c1)(c1, x1, 10**6)
    torch.testing.assert_close(
        X1 @ c1.weight.reshape(4, -1).T, c1(x1).transpose(1, 2).reshape(-1, 4)
    )


def test_small_cnn_trains_with_criterion_on_conv_layers():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 6, 3), nn.Flatten(), nn.Linear(6 * 4 * 4, 10)
    )
    opt = AdaptiveLMO(net, lr=0.02, update_every=1)
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    geo = opt.geometry()
    assert geo["0.weight"]["source"].startswith(("criterion", "kept: a = "))
    assert geo["2.weight"]["matrix_shape"] == (6, 36)
    assert losses[-1] < losses[0]


class MoE(nn.Module):
    def __init__(self, E=3, d=6, h=5):
        super().__init__()
        self.w = nn.Parameter(torch.randn(E, h, d, dtype=torch.float64) / d**0.5)
        self.head = nn.Linear(h, 1).double()

    def forward(self, x):  # every expert sees every token (dense mixture)
        return self.head(torch.tanh(torch.einsum("ehd,nd->neh", self.w, x)).mean(1))


def test_moe_stacked_experts_are_batched_matrices():
    moe = MoE()
    ref = copy.deepcopy(moe)
    opt = AdaptiveLMO(moe, lr=0.05, momentum=0.0, exponent=0.0, adamw_lr=0.0)
    assert opt.geometry()["w"]["matrix_shape"] == (3, 5, 6)
    x = torch.randn(11, 6, dtype=torch.float64)
    moe(x).pow(2).mean().backward()
    ref(x).pow(2).mean().backward()
    opt.step()
    want = torch.stack([ref.w[e] - 0.05 * msign(ref.w.grad[e], method="svd") for e in range(3)])
    torch.testing.assert_close(moe.w.detach(), want)


def test_moe_auto_falls_back_then_uses_recorded_activations():
    moe = MoE()
    opt = AdaptiveLMO(moe, lr=0.05, fallback_exponent=0.25, update_every=1, stats="same_batch")
    x = torch.randn(11, 6, dtype=torch.float64)
    moe(x).pow(2).mean().backward()
    with pytest.warns(UserWarning, match="no forward hook"):
        opt.step()
    assert opt.geometry()["w"]["exponent"] == 0.25
    assert "no forward hook" in opt.geometry()["w"]["source"]
    opt.zero_grad()
    moe(x).pow(2).mean().backward()
    opt.record_activations(moe.w, x.expand(3, 11, 6))
    opt.step()
    assert opt.geometry()["w"]["source"].startswith("criterion")
    with pytest.raises(ValueError, match="leading dims"):
        opt.record_activations(moe.w, x)


def test_moe_next_batch_pairs_kept_factors_with_the_next_recorded_rows():
    moe = MoE()
    opt = AdaptiveLMO(moe, lr=0.05, fallback_exponent=0.25, update_every=1)
    xs = [torch.randn(11, 6, dtype=torch.float64) for _ in range(2)]
    moe(xs[0]).pow(2).mean().backward()
    opt.step()  # step 1: fallback; factors of this direction kept
    assert opt.geometry()["w"]["exponent"] == 0.25
    Vh, s = opt.state[moe.w]["pending_Vh"].clone(), opt.state[moe.w]["pending_s"].clone()
    opt.zero_grad()
    moe(xs[1]).pow(2).mean().backward()
    rows = xs[1].expand(3, 11, 6)
    opt.record_activations(moe.w, rows)
    opt.step()
    c = ((rows @ Vh.transpose(-1, -2)) ** 2).sum(-2) / 11  # brute force ||X v_i||^2 / rows
    assert opt.geometry()["w"]["exponent"] == pytest.approx(choose_exponent(s, c), abs=1e-12)
    assert opt.geometry()["w"]["source"].startswith("criterion")


def test_unused_layer_gets_fallback_then_keeps_its_exponent():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 4)
            self.head = nn.Linear(4, 1)

        def forward(self, x, use_b):
            return self.head(self.b(self.a(x)) if use_b else self.a(x))

    torch.manual_seed(0)
    net = Two()
    opt = AdaptiveLMO(net, update_every=1, fallback_exponent=0.5, stats="same_batch")
    x = torch.randn(9, 4)
    # b is unused: no gradient, no step for it
    net(x, False).pow(2).mean().backward()
    opt.step()
    assert opt.geometry()["b.weight"]["exponent"] is None
    # b has a gradient but its forward ran without grad recording: fallback
    opt.zero_grad()
    with torch.no_grad():
        h = net.b(net.a(x))
    (net.head(h) ** 2).mean().backward()
    net.b.weight.grad = torch.randn(4, 4)
    with pytest.warns(UserWarning, match="no activations recorded yet"):
        opt.step()
    assert opt.geometry()["b.weight"]["exponent"] == 0.5
    opt.zero_grad()
    net(x, True).pow(2).mean().backward()
    opt.step()
    a_b = opt.geometry()["b.weight"]["exponent"]
    assert opt.geometry()["b.weight"]["source"].startswith("criterion")
    opt.zero_grad()
    (net.head(net.a(x)) ** 2).mean().backward()
    net.b.weight.grad = torch.randn(4, 4)
    with pytest.warns(UserWarning, match="keeping its last exponent"):
        opt.step()
    assert opt.geometry()["b.weight"]["exponent"] == a_b


def test_non_finite_activations_keep_the_exponent_with_a_warning():
    m = _mlp()
    opt = AdaptiveLMO(m, update_every=1, fallback_exponent=0.3)
    x, y = _batches(1)[0]
    F.mse_loss(m(x), y).backward()
    opt.step()
    a0 = opt.geometry()["0.weight"]["exponent"]
    opt.zero_grad()
    F.mse_loss(m(x), y).backward()
    opt._collector.rows[id(m[0].weight)] = [torch.full((3, 7), math.nan, dtype=torch.float64)]
    with pytest.warns(UserWarning, match="criterion skipped"):
        opt.step()
    assert opt.geometry()["0.weight"]["exponent"] == a0
    assert "non-finite" in opt.geometry()["0.weight"]["source"]


def test_non_finite_gradient_raises():
    m = _mlp()
    opt = AdaptiveLMO(m)
    x, y = _batches(1)[0]
    F.mse_loss(m(x), y).backward()
    m[2].weight.grad[0, 0] = math.nan
    with pytest.raises(ValueError, match=r"non-finite gradient \(NaN or inf\) in 2.weight"):
        opt.step()


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"lr": -1.0}, "lr"),
        ({"momentum": 1.0}, "momentum"),
        ({"exponent": 1.5}, "exponent"),
        ({"exponent": "sometimes"}, "exponent"),
        ({"fallback_exponent": -0.1}, "fallback_exponent"),
        ({"update_every": 0}, "update_every"),
        ({"criterion": "newton"}, "criterion"),
        ({"method": "qr"}, "method"),
        ({"scale": "rms"}, "scale"),
        ({"precondition": "shampoo"}, "precondition"),
        ({"adjust_lr_fn": "huge"}, "adjust_lr_fn"),
        ({"max_rows": 0}, "max_rows"),
        ({"adamw_betas": (0.9, 1.0)}, "adamw beta2"),
        ({"head": "nonexistent"}, "head"),
    ],
)
def test_bad_arguments_raise(kw, match):
    with pytest.raises(ValueError, match=match):
        AdaptiveLMO(_mlp(), **kw)


def test_auto_needs_a_model_for_bare_parameters():
    m = _mlp()
    with pytest.raises(ValueError, match="forward hooks"):
        AdaptiveLMO(m.parameters())
    opt = AdaptiveLMO(m.parameters(), exponent=0.5)  # fixed geometry needs no hooks
    assert set(opt.routing().values()) == {"lmo", "adamw"}
    with pytest.raises(ValueError, match="empty"):
        AdaptiveLMO([])
    with pytest.raises(ValueError, match="algorithm"):
        AdaptiveLMO([{"params": [m[0].weight, m[0].bias], "exponent": 0.5}])


def test_bf16_and_float32_params_train():
    for dtype in (torch.float32, torch.bfloat16):
        m = _mlp(dtype=dtype)
        opt = AdaptiveLMO(m, lr=0.02, update_every=2)
        bs = _batches(8, dtype=dtype)
        first = None
        for x, y in bs[:1] * 8:
            opt.zero_grad()
            loss = F.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            first = first if first is not None else float(loss.detach())
        assert float(F.mse_loss(m(x), y)) < first
        assert all(p.dtype == dtype and torch.isfinite(p).all() for p in m.parameters())


def test_closure_and_zero_momentum_sgd():
    m = _mlp()
    opt = AdaptiveLMO(m, lr=0.05, momentum=0.0, exponent=1.0, scale="none", adjust_lr_fn="unit")
    x, y = _batches(1)[0]

    def closure():
        opt.zero_grad()
        loss = F.mse_loss(m(x), y)
        loss.backward()
        return loss

    l0 = opt.step(closure)
    assert float(closure()) < float(l0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.step(closure)
