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


def test_lora_linear_factors_have_peft_names_shapes_and_function():
    # lora_A (r, in), lora_B (out, r), delta W = s B A: copying them into peft's LoRA layer on
    # the same base gives the same outputs (peft as the independent reference)
    peft = pytest.importorskip("peft")
    torch.manual_seed(4)
    base = nn.Linear(13, 7).double()
    ours = LoRALinear.from_linear(base, rank=3, alpha=5, init_std=0.3)
    assert tuple(ours.lora_A.shape) == (3, 13) and tuple(ours.lora_B.shape) == (7, 3)
    model = nn.Sequential(nn.Linear(13, 7).double())
    with torch.no_grad():
        model[0].weight.copy_(ours.weight)  # the base with the offset folded in
        model[0].bias.copy_(ours.bias)
    pm = peft.get_peft_model(model, peft.LoraConfig(r=3, lora_alpha=5, target_modules=["0"]))
    layer = pm.base_model.model[0]
    with torch.no_grad():
        layer.lora_A["default"].weight.copy_(ours.lora_A)
        layer.lora_B["default"].weight.copy_(ours.lora_B)
    x = torch.randn(9, 13, dtype=torch.float64)
    torch.testing.assert_close(ours(x), pm(x), atol=1e-13, rtol=0)
    # and imuon_param_groups hands the pair over in peft's layout
    group = imuon_param_groups(ours)[0]
    assert group["factor_layout"] == "peft"
    assert group["params"][0] is ours.lora_B and group["params"][1] is ours.lora_A


def test_scaled_gd_takes_peft_layout_pairs_like_ab_pairs():
    from imuon.baselines import ScaledGD

    g = torch.Generator().manual_seed(6)
    a0 = torch.randn(9, 2, dtype=torch.float64, generator=g)
    b0 = torch.randn(6, 2, dtype=torch.float64, generator=g)
    target = torch.randn(9, 6, dtype=torch.float64, generator=g)
    A, B = nn.Parameter(a0.clone()), nn.Parameter(b0.clone())
    lb, la = nn.Parameter(a0.clone()), nn.Parameter(b0.mT.clone())
    ab = ScaledGD([A, B], lr=0.1, momentum=0.9, damping=1e-6)
    pf = ScaledGD([lb, la], lr=0.1, momentum=0.9, damping=1e-6, factor_layout="peft")
    for _ in range(5):
        for opt, prod in ((ab, lambda: A @ B.T), (pf, lambda: lb @ la)):
            opt.zero_grad()
            (prod() - target).pow(2).sum().backward()
            opt.step()
    torch.testing.assert_close(lb.detach(), A.detach(), atol=1e-12, rtol=0)
    torch.testing.assert_close(la.detach(), B.detach().T, atol=1e-12, rtol=0)
