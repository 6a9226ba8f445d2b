"""layerwise_ntk (torch.func vjp + per-layer contraction) against the explicit J J^T."""

import pytest
import torch
from torch import nn

from langevin_ntk import MLP
from langevin_ntk.layerwise import layerwise_ntk
from langevin_ntk.ntk import empirical_ntk, jacobian_loop

F64 = torch.float64


@pytest.mark.parametrize(
    ("depth", "d_out", "par", "act"),
    [(2, 1, "standard", "tanh"), (3, 3, "ntk", "gelu"), (5, 2, "standard", "softplus")],
)
def test_mlp_matches_explicit_jacobian(depth, d_out, par, act):
    g = torch.Generator().manual_seed(depth)
    net = MLP(6, 11, depth, act, par, d_out, generator=g, dtype=F64)
    x = torch.randn(9, 6, generator=g, dtype=F64)
    j = jacobian_loop(net, x)  # independent reference: per-sample autograd
    k = layerwise_ntk(net, x)
    # float64: both sides sum O(P) products of O(1) numbers, error ~ P eps |K|
    assert torch.allclose(k, j @ j.T, rtol=0, atol=1e-10 * float(k.abs().max()))
    assert net._tap is None  # the tap is removed again


def test_sequential_with_biases_and_frozen_parts_matches_torch_func():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(5, 9), nn.Softplus(), nn.Linear(9, 7, bias=False), nn.Tanh(), nn.Linear(7, 3)
    ).double()
    net[0].bias.requires_grad_(False)
    net[2].weight.requires_grad_(False)  # a layer with nothing trained contributes nothing
    x = torch.randn(10, 5, dtype=F64)
    ref = empirical_ntk(net, x)
    assert torch.allclose(layerwise_ntk(net, x), ref, rtol=0, atol=1e-10 * float(ref.abs().max()))
    assert not net[0]._forward_hooks  # hooks removed


def test_float32_agrees_to_float32_accuracy():
    net = MLP(16, 64, 3, "tanh", generator=torch.Generator().manual_seed(1))
    x = torch.randn(33, 16, generator=torch.Generator().manual_seed(2))
    ref = empirical_ntk(net, x).double()
    k = layerwise_ntk(net, x).double()
    # float32 sums over P ~ 5e3 terms: relative error ~ sqrt(P) * 6e-8 ~ 4e-6; allow 10x
    assert float((k - ref).abs().max() / ref.abs().max()) < 4e-5


def test_unsupported_models_raise():
    x = torch.randn(4, 3)
    with pytest.raises(ValueError, match=r"nn\.Linear"):
        layerwise_ntk(nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 1)), x)
    lin = nn.Linear(3, 3)
    with pytest.raises(ValueError, match="exactly once"):
        layerwise_ntk(nn.Sequential(lin, nn.Tanh(), lin), x)
    with pytest.raises(ValueError, match=r"\(n, features\)"):
        layerwise_ntk(nn.Linear(3, 1), torch.randn(4, 2, 3))
    with pytest.raises(ValueError, match="non-empty"):
        layerwise_ntk(nn.Linear(3, 1), torch.randn(0, 3))
