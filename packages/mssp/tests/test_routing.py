"""Routing, dispatch and the MoE layer against per-token loop references (float64)."""

from __future__ import annotations

import math

import pytest
import torch

from mssp import MoELayer, dispatch, load_balancing_loss, topk_route

EPS = torch.finfo(torch.float64).eps


def loop_route(logits: torch.Tensor, k: int, renormalize: bool):
    """Brute force: sort each row, keep the k largest, softmax weights (pure Python floats)."""
    idx, gates = [], []
    for row in logits.tolist():
        order = sorted(range(len(row)), key=lambda j: -row[j])[:k]
        mx = max(row)
        w = [math.exp(row[j] - mx) for j in order]
        s = sum(w) if renormalize else sum(math.exp(v - mx) for v in row)
        idx.append(order)
        gates.append([v / s for v in w])
    return idx, gates


def loop_layer(layer: MoELayer, h: torch.Tensor) -> torch.Tensor:
    """The layer's map written token by token, expert by expert (autograd-friendly)."""
    outs = []
    for t in range(h.shape[0]):
        x = h[t]
        if layer.norm:
            x = x / torch.sqrt(x.pow(2).mean() + 1e-6)
        r = layer.mult_router * (layer.router @ x)
        top = sorted(range(layer.m), key=lambda j: -float(r[j].detach()))[: layer.k]
        g = torch.softmax(r[top], 0) if layer.renormalize else torch.softmax(r, 0)[top]
        acc = torch.zeros(layer.n, dtype=h.dtype)
        for gi, e in zip(g, top, strict=True):
            u = layer.mult1 * (layer.w1[e] @ x)
            acc = acc + gi * layer.mult2 * (layer.w2[e] @ torch.relu(u))
        outs.append(layer.mult_agg * acc)
    return torch.stack(outs)


@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize(("t", "m", "k"), [(13, 5, 1), (17, 7, 3), (9, 4, 4), (1, 3, 2)])
def test_topk_route_matches_loop(t, m, k, renormalize):
    g = torch.Generator().manual_seed(t * 100 + m)
    logits = torch.randn(t, m, generator=g, dtype=torch.float64) * 3
    idx, gate = topk_route(logits, k, renormalize=renormalize)
    ridx, rgate = loop_route(logits, k, renormalize)
    assert idx.tolist() == ridx
    # softmax of k numbers: each gate has relative error a few eps
    torch.testing.assert_close(
        gate, torch.tensor(rgate, dtype=torch.float64), rtol=20 * EPS * m, atol=0
    )


@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize(
    ("n", "ne", "m", "k", "t"),
    [(6, 5, 4, 2, 11), (7, 3, 5, 1, 9), (5, 4, 3, 3, 8), (9, 2, 6, 4, 1)],
)
def test_layer_forward_and_grad_match_loop(n, ne, m, k, t, renormalize):
    torch.manual_seed(n * 31 + m)
    layer = MoELayer(n, ne, m, k, renormalize=renormalize).double()
    layer.mult_router, layer.mult1, layer.mult2, layer.mult_agg = 0.7, 1.3, 0.9, 1.7
    h = torch.randn(t, n, dtype=torch.float64, requires_grad=True)
    out = layer(h)
    ref = loop_layer(layer, h)
    # a few dot products of length <= max(n, ne): error ~ eps * size * |terms|
    tol = 50 * EPS * max(n, ne) * float(ref.detach().abs().max() + 1)
    torch.testing.assert_close(out, ref, rtol=0, atol=tol)
    # gradients of a random functional, two routes (batched dispatch vs the loop)
    c = torch.randn(t, n, dtype=torch.float64)
    params = [h, layer.router, layer.w1, layer.w2]
    g1 = torch.autograd.grad((out * c).sum(), params)
    g2 = torch.autograd.grad((loop_layer(layer, h) * c).sum(), params)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=tol * 10)


def test_layer_gradcheck_float64():
    torch.manual_seed(0)
    layer = MoELayer(4, 3, 3, 2).double()
    h = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    # routing is piecewise constant; a random point has no ties, so finite differences apply
    assert torch.autograd.gradcheck(lambda x: layer(x), (h,), eps=1e-6, atol=1e-6)


def test_dispatch_covers_every_slot_once():
    g = torch.Generator().manual_seed(3)
    index, _ = topk_route(torch.randn(23, 6, generator=g), 3)
    d = dispatch(index, 6)
    assert int(d.load.sum()) == 23 * 3
    assert d.capacity == int(d.load.max())
    pairs = set(zip(d.token.tolist(), d.expert.tolist(), strict=True))
    assert pairs == {(t, int(e)) for t in range(23) for e in index[t]}
    slots = set(zip(d.expert.tolist(), d.position.tolist(), strict=True))
    assert len(slots) == 23 * 3
    assert all(0 <= p < int(d.load[e]) for e, p in slots)


def test_load_balancing_loss_brute_force():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(10, 5, generator=g, dtype=torch.float64)
    index, _ = topk_route(logits, 2)
    counts = [0] * 5
    for row in index.tolist():
        for e in row:
            counts[e] += 1
    probs = torch.softmax(logits, -1).mean(0).tolist()
    ref = 5 * sum(c / 20 * p for c, p in zip(counts, probs, strict=True))
    assert abs(float(load_balancing_loss(logits, index)) - ref) < 1e-12


def test_balanced_router_loss_is_one():
    # two tokens, two experts, K=1, logits that send one token to each with probs (p, 1-p)
    logits = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    index, _ = topk_route(logits, 1)
    assert abs(float(load_balancing_loss(logits, index)) - 1.0) < 1e-12


@pytest.mark.parametrize("k", [0, 5, -1, 2.0, True])
def test_bad_k(k):
    with pytest.raises(ValueError, match="k must be"):
        topk_route(torch.zeros(3, 4), k)


def test_k_greater_than_m_rejected_by_layer():
    with pytest.raises(ValueError, match="K=5 > M=4"):
        MoELayer(8, 8, 4, 5)


def test_bad_shapes():
    with pytest.raises(ValueError, match="shape"):
        topk_route(torch.zeros(3), 1)
    with pytest.raises(ValueError, match="input must have shape"):
        MoELayer(8, 4, 4, 2)(torch.zeros(3, 7))
    with pytest.raises(ValueError, match="N_e must be a positive int"):
        MoELayer(8, 0, 4, 2)
    with pytest.raises(ValueError, match="act must be one of"):
        MoELayer(8, 4, 4, 2, act="swish")
