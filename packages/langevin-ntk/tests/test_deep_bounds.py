"""The depth-L init bound: its conditional Gram by Monte-Carlo, its validity by resampling the
last hidden layer against the exact NTK, and its infinite-width limit."""

import math

import numpy as np
import pytest
import torch

from langevin_ntk import MLP
from langevin_ntk.bounds import init_lambda_min_bound, last_layer_gram
from langevin_ntk.deep_bounds import (
    deep_gram_infinite_width,
    deep_init_lambda_min_bound,
    last_hidden_inputs,
)
from langevin_ntk.ntk import mlp_ntk

F64 = torch.float64


def _sphere(n, d, seed):
    x = torch.randn(n, d, dtype=F64, generator=torch.Generator().manual_seed(seed))
    return x / x.norm(dim=1, keepdim=True) * math.sqrt(d)


def _net(d, m, depth, seed, par="standard"):
    return MLP(d, m, depth, "tanh", par, generator=torch.Generator().manual_seed(seed), dtype=F64)


def test_depth_two_is_the_one_hidden_layer_bound():
    x = _sphere(5, 16, 0)
    b = deep_init_lambda_min_bound(_net(16, 700, 2, 1), x, 0.1)
    lam = float(torch.linalg.eigvalsh(last_layer_gram(x, "tanh"))[0])
    assert b["lambda_gram"] == pytest.approx(lam, rel=1e-12)
    assert b["kappa"] == pytest.approx(init_lambda_min_bound(700, 5, lam, 1.0, 0.1), rel=1e-12)


def _resampled_phi(h, m, gen):
    """Phi for fresh last-hidden-layer weights N(0, I/q), the lower layers fixed."""
    w = torch.randn(m, h.shape[1], dtype=F64, generator=gen) / math.sqrt(h.shape[1])
    return torch.tanh(h @ w.T), w


def test_conditional_gram_is_the_mean_of_the_output_layer_part():
    """E[Phi Phi^T / m | lower layers] = G(C): Monte-Carlo over the last hidden layer."""
    x = _sphere(6, 11, 2)
    h = last_hidden_inputs(_net(11, 37, 4, 3), x)
    gram = last_layer_gram(h, "tanh")
    gen = torch.Generator().manual_seed(4)
    phi, _ = _resampled_phi(h, 200_000, gen)  # 200k i.i.d. units
    outer = phi[:, None, :] * phi[None, :, :]  # (n, n, units)
    mean, se = outer.mean(-1), outer.std(-1) / math.sqrt(phi.shape[1])
    assert bool(((mean - gram).abs() <= 5 * se + 1e-12).all())  # 5 SE: no false alarm in 36


@pytest.mark.parametrize(
    ("depth", "par"),
    [(3, "standard"), (3, "ntk"), pytest.param(4, "standard", marks=pytest.mark.slow)],
)
def test_bound_holds_when_the_last_hidden_layer_is_resampled(depth, par):
    """Exact NTK (per-layer Gram) of networks sharing the lower layers, last hidden layer
    redrawn: the fraction at or below kappa must not exceed the level beyond MC error."""
    x, m, p, draws = _sphere(5, 16, 5), 300, 0.2, 60
    net = _net(16, m, depth, 6, par)
    b = deep_init_lambda_min_bound(net, x, p)
    assert b["kappa"] > 0
    h = last_hidden_inputs(net, x)
    gen = torch.Generator().manual_seed(7)
    below = 0
    lam_phi = []
    for _ in range(draws):
        phi, w = _resampled_phi(h, m, gen)
        with torch.no_grad():
            net.weights[-2].copy_(w if par == "standard" else w * math.sqrt(h.shape[1]))
        lam = float(torch.linalg.eigvalsh(mlp_ntk(net, x))[0])
        lam_phi.append(float(torch.linalg.eigvalsh(phi @ phi.T)[0]))
        below += lam <= b["kappa"]
        scale = 1.0 if par == "standard" else 1.0 / m
        assert lam >= scale * lam_phi[-1] * (1 - 1e-10)  # K dominates the output layer's part
    assert below / draws <= p + 3 * math.sqrt(p * (1 - p) / draws)
    # the bound is not vacuous: it sits at a fixed fraction of the typical m * lambda_G
    mean_part = float(np.mean(lam_phi)) * (1.0 if par == "standard" else 1.0 / m)
    assert 0 < b["kappa"] < mean_part


def test_ntk_parameterisation_bound_is_the_standard_one_over_width():
    x = _sphere(5, 16, 8)
    std = _net(16, 400, 3, 9)
    ntk = _net(16, 400, 3, 9, "ntk")
    with torch.no_grad():  # same function: NTK weights are the standard ones times sqrt(fan_in)
        for ws, wn in zip(std.weights, ntk.weights, strict=True):
            wn.copy_(ws * math.sqrt(ws.shape[1]))
    bs, bn = deep_init_lambda_min_bound(std, x, 0.1), deep_init_lambda_min_bound(ntk, x, 0.1)
    assert bn["lambda_gram"] == pytest.approx(bs["lambda_gram"], rel=1e-10)
    assert bn["kappa"] == pytest.approx(bs["kappa"] / 400, rel=1e-10)


def test_hidden_gram_tends_to_the_infinite_width_limit_like_one_over_sqrt_width():
    x, depth = _sphere(5, 16, 10), 3
    limit = deep_gram_infinite_width(x, depth, "tanh")
    widths = [64, 256, 1024]
    errs = []
    for m in widths:
        e = [
            float(
                (
                    last_layer_gram(last_hidden_inputs(_net(16, m, depth, s), x), "tanh") - limit
                ).norm()
            )
            for s in range(6)
        ]
        errs.append(np.mean(e))
    slope = np.polyfit(np.log(widths), np.log(errs), 1)[0]
    # C - Sigma is an average of m i.i.d. terms: error ~ m^{-1/2}; 6 seeds x 3 widths
    assert -0.8 <= slope <= -0.3, (slope, errs)


def test_bad_input_and_warnings():
    x = _sphere(3, 4, 11)
    relu = MLP(4, 50, 3, "relu", generator=torch.Generator().manual_seed(0), dtype=F64)
    with pytest.warns(UserWarning, match="not smooth"):
        deep_init_lambda_min_bound(relu, x, 0.1)
    with pytest.raises(ValueError, match="d_out == 1"):
        deep_init_lambda_min_bound(MLP(4, 8, 3, d_out=2), x.float(), 0.1)
    with pytest.raises(ValueError, match="depth"):
        deep_gram_infinite_width(x, 1, "tanh")
    with pytest.raises(ValueError, match="failure_prob"):
        deep_init_lambda_min_bound(_net(4, 50, 3, 0), x, 1.5)
    assert deep_init_lambda_min_bound(_net(4, 3, 3, 0), x, 0.1)["kappa"] == 0.0  # too narrow
