"""Saving a peft adapter trained after ``prepare_peft_for_imuon`` and loading it onto the
original base model (issue 20, part 2)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from imuon import IMuon
from imuon.lora import find_lora_pairs, peft_param_groups, prepare_peft_for_imuon
from imuon.peft_io import OFFSETS_FILE, load_peft_adapter, save_peft_adapter

peft = pytest.importorskip("peft")
pytestmark = pytest.mark.numerics

DIMS = (11, 17, 7)  # awkward sizes: in, hidden, out


def _base(dtype):
    torch.manual_seed(5)
    return nn.Sequential(nn.Linear(DIMS[0], DIMS[1]), nn.Tanh(), nn.Linear(DIMS[1], DIMS[2])).to(
        dtype
    )


def _trained(dtype, use_rslora=False):
    """(original base, prepared and trained peft model, inputs)."""
    base = _base(dtype)
    original = copy.deepcopy(base)
    cfg = peft.LoraConfig(r=3, lora_alpha=6, target_modules=["0", "2"], use_rslora=use_rslora)
    pm = peft.get_peft_model(base, cfg)
    # a large init makes the folded offset s B0 A0 large against round-off, so a reload that
    # drops it is far outside the tolerance below
    prepare_peft_for_imuon(pm, init_std=0.3, seed=1)
    x = torch.randn(23, DIMS[0], dtype=dtype)
    y = torch.randn(23, DIMS[2], dtype=dtype)
    opt = IMuon(peft_param_groups(pm, lr=0.05))
    for _ in range(15):
        opt.zero_grad()
        (pm(x) - y).pow(2).mean().backward()
        opt.step()
    return original, pm, x


@torch.no_grad()
def _tolerance(pm, x):
    """Worst-case error model for two routes to y = W2 tanh(W1 x + b1) + b2 whose weights are
    each a sum of at most three rounded matrices (W0, s B0 A0, s B A): layer k's output is off
    by <= c n_k eps w_k |input| (n_k its fan-in plus the bias, w_k the largest
    |W0| + |s B0 A0| + |s B A|);
    tanh is 1-Lipschitz and bounded by 1, so
    |dy| <= c eps n_hid w_2 (n_in w_1 |x| + 1), with c = 8 for the three summands and the sum."""
    eps = torch.finfo(x.dtype).eps
    w = []
    for layer in (pm.base_model.model[0], pm.base_model.model[2]):
        size = layer.base_layer.weight.abs()
        for ad in layer.lora_A:
            s = layer.scaling[ad]
            size = size + (s * layer.lora_B[ad].weight @ layer.lora_A[ad].weight).abs()
        # the bias enters the same sum: count it as one more weight of that size
        w.append(float(size.max()))
    return 8 * eps * (DIMS[1] + 1) * w[1] * ((DIMS[0] + 1) * w[0] * float(x.abs().max()) + 1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("use_rslora", [False, True])
def test_portable_adapter_reloads_onto_the_original_base_with_plain_peft(
    tmp_path, dtype, use_rslora
):
    original, pm, x = _trained(dtype, use_rslora)
    with torch.no_grad():
        want = pm(x)
    tol = _tolerance(pm, x)
    # control: peft's own save drops the folded offset (the reported bug)
    pm.save_pretrained(tmp_path / "plain")
    plain = peft.PeftModel.from_pretrained(copy.deepcopy(original), tmp_path / "plain")
    with torch.no_grad():
        assert float((plain(x) - want).abs().max()) > 100 * tol
    save_peft_adapter(pm, tmp_path / "portable")
    loaded = peft.PeftModel.from_pretrained(copy.deepcopy(original), tmp_path / "portable")
    assert loaded.peft_config["default"].r == 6
    # the base weights of the reloaded model are the original ones, untouched
    for got, ref in zip(
        (
            loaded.base_model.model[0].base_layer.weight,
            loaded.base_model.model[2].base_layer.weight,
        ),
        (original[0].weight, original[2].weight),
        strict=True,
    ):
        assert torch.equal(got, ref)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), want, atol=tol, rtol=0)
    # the in-memory model is untouched by the export (config and factors restored)
    assert pm.peft_config["default"].r == 3
    assert all(a.shape[0] == 3 for _, _, a in find_lora_pairs(pm))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_resumable_adapter_reloads_the_model_and_training_continues_alike(tmp_path, dtype):
    original, pm, x = _trained(dtype)
    save_peft_adapter(pm, tmp_path / "resume", portable=False)
    assert (tmp_path / "resume" / OFFSETS_FILE).exists()
    loaded = load_peft_adapter(copy.deepcopy(original), tmp_path / "resume", is_trainable=True)
    # the fold is redone by the same function on the same inputs: the base weights match the
    # in-memory ones to round-off (bitwise on one machine, but not asserted as such)
    for got, ref in zip(
        (
            loaded.base_model.model[0].base_layer.weight,
            loaded.base_model.model[2].base_layer.weight,
        ),
        (pm.base_model.model[0].base_layer.weight, pm.base_model.model[2].base_layer.weight),
        strict=True,
    ):
        eps = torch.finfo(dtype).eps
        torch.testing.assert_close(got, ref, atol=8 * eps * float(ref.abs().max()), rtol=0)
    tol = _tolerance(pm, x)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), pm(x), atol=tol, rtol=0)
    # both continue as the same rank-r points: one more IMuon step each, from fresh optimizers
    y = torch.randn(23, DIMS[2], dtype=dtype, generator=torch.Generator().manual_seed(2))
    for model in (pm, loaded):
        opt = IMuon(peft_param_groups(model, lr=0.05))
        opt.zero_grad()
        (model(x) - y).pow(2).mean().backward()
        opt.step()
    with torch.no_grad():
        # a step amplifies a perturbation of the gradient by ~cond of the pair's frames; the
        # pairs here are well conditioned (random, r = 3), so allow 1e3 x the model tolerance
        torch.testing.assert_close(loaded(x), pm(x), atol=1e3 * tol, rtol=0)
    # and the reloaded model saves again, portably, to the same function
    save_peft_adapter(loaded, tmp_path / "again")
    again = peft.PeftModel.from_pretrained(copy.deepcopy(original), tmp_path / "again")
    with torch.no_grad():
        torch.testing.assert_close(again(x), loaded(x), atol=tol, rtol=0)


def test_save_refuses_an_unknown_adapter_and_an_unprepared_model_saves_as_peft(tmp_path):
    base = _base(torch.float32)
    pm = peft.get_peft_model(base, peft.LoraConfig(r=2, target_modules=["0"]))
    with pytest.raises(ValueError, match="unknown adapter"):
        save_peft_adapter(pm, tmp_path / "x", adapter_name="nope")
    save_peft_adapter(pm, tmp_path / "plain")
    assert not (tmp_path / "plain" / OFFSETS_FILE).exists()
    assert peft.PeftConfig.from_pretrained(tmp_path / "plain").r == 2
