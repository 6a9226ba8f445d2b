"""LoRALinear, param-group helpers and peft pair discovery."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from imuon import IMuon
from imuon.lora import (
    LoRALinear,
    find_lora_pairs,
    imuon_param_groups,
    peft_param_groups,
    prepare_peft_for_imuon,
)

# tolerances here follow an error model; `nox -s numerics` reruns them on every BLAS path
pytestmark = pytest.mark.numerics


def test_lora_linear_keeps_the_function_and_trains_as_one_fixed_rank_point():
    torch.manual_seed(0)
    base = nn.Linear(12, 9)
    layer = LoRALinear.from_linear(base, rank=3, alpha=6)
    x = torch.randn(40, 12)
    torch.testing.assert_close(layer(x), base(x), atol=1e-5, rtol=1e-5)
    target = torch.randn(40, 9)
    groups = imuon_param_groups(layer, lr=0.05)
    assert groups[0]["manifold"] == "fixed_rank" and len(groups[0]["params"]) == 2
    assert [p is layer.bias for p in groups[1]["params"]] == [True]
    opt = IMuon(groups)
    first = None
    for _ in range(60):
        opt.zero_grad()
        loss = (layer(x) - target).pow(2).mean()
        loss.backward()
        opt.step()
        first = first if first is not None else float(loss)
    assert float(loss) < 0.8 * first
    assert torch.linalg.matrix_rank(layer.delta().detach()) == 3
    assert not layer.weight.requires_grad


def test_lora_linear_rejects_a_rank_above_the_dims():
    with pytest.raises(ValueError, match="rank"):
        LoRALinear(4, 3, rank=4)


def test_peft_pairs_are_found_prepared_and_stepped():
    peft = pytest.importorskip("peft")
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 5))
    x = torch.randn(30, 10)
    before = model(x).detach()
    cfg = peft.LoraConfig(r=2, lora_alpha=4, target_modules=["0", "2"])
    pm = peft.get_peft_model(model, cfg)
    pairs = find_lora_pairs(pm)
    assert len(pairs) == 2
    assert [tuple(b.shape) for _, b, _ in pairs] == [(16, 2), (5, 2)]
    assert prepare_peft_for_imuon(pm) == 2
    torch.testing.assert_close(pm(x), before, atol=1e-5, rtol=1e-5)
    assert all(float(b.norm()) > 0 for _, b, _ in pairs)
    opt = IMuon(peft_param_groups(pm, lr=0.02))
    y = torch.randn(30, 5)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = (pm(x) - y).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0]


def test_peft_fold_keeps_a_float64_model_to_float64_round_off():
    # the fold W - s B A must be computed in the model's dtype: a float32 fold moved a float64
    # model's outputs by ~1e-8 (float32 round-off of B A). Error model in float64: each output
    # is a sum of <= 16 * 10 products of O(1) terms, so ~1e2 * eps64 ~ 2e-14; allow 1e-12.
    peft = pytest.importorskip("peft")
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(11, 17), nn.Tanh(), nn.Linear(17, 7)).double()
    x = torch.randn(29, 11, dtype=torch.float64)
    before = model(x).detach()
    pm = peft.get_peft_model(model, peft.LoraConfig(r=3, lora_alpha=6, target_modules=["0", "2"]))
    assert all(b.dtype == torch.float64 for _, b, _ in find_lora_pairs(pm))
    assert prepare_peft_for_imuon(pm, init_std=0.5) == 2
    torch.testing.assert_close(pm(x), before, atol=1e-12, rtol=0)
