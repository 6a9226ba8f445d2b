"""parameterize(): the tables as applied, the dense case against `mup`, and bad input."""

from __future__ import annotations

import math

import mup
import pytest
import torch
from torch import nn

from mssp import (
    REGIMES,
    SCHEMES,
    MoELayer,
    MoEModel,
    get_scheme,
    parameterize,
    size_ratios,
    table_markdown,
)

BASE = {"N": 8, "Ne": 8, "M": 4, "K": 2, "L": 2}


def _model(shape, d_in=5, d_out=3):
    return MoEModel(
        d_in, d_out, n=shape["N"], ne=shape["Ne"], m=shape["M"], k=shape["K"], depth=shape["L"]
    )


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("regime", list(REGIMES))
def test_all_schemes_equal_at_base(optimizer, regime):
    outs = []
    for scheme in SCHEMES:
        torch.manual_seed(0)
        model = _model(BASE)
        groups = parameterize(model, scheme, optimizer, regime=regime, base_shapes=BASE, lr=0.01)
        assert all(g["lr"] == 0.01 for g in groups)
        torch.manual_seed(1)
        outs.append(model(torch.randn(6, 5)))
    for o in outs[1:]:
        torch.testing.assert_close(o, outs[0], rtol=0, atol=0)


def test_lr_and_multipliers_follow_the_table():
    shape = {"N": 32, "Ne": 8, "M": 16, "K": 8, "L": 8}  # regime II: n = m = k = 4, l = 4
    model = _model(shape)
    groups = {
        g["name"]: g["lr"]
        for g in parameterize(model, "mup", "adam", regime="II", base_shapes=BASE, lr=1.0)
    }
    # w1: n^-1 k^-1/2 l^-1/2 = 1/4 * 1/2 * 1/2
    assert groups["blocks.0.w1"] == pytest.approx(1 / 16)
    assert groups["blocks.3.w2"] == pytest.approx(1 / 4)  # e = 1: k^-1/2 l^-1/2
    assert groups["blocks.0.router"] == pytest.approx(1 / 16)
    assert groups["embed"] == groups["readout"] == 1.0
    assert model.blocks[0].mult_agg == pytest.approx(2.0)
    assert model.branch == pytest.approx(0.5)
    assert model.mult_readout == pytest.approx(0.25)
    model2 = _model(shape)
    groups2 = {
        g["name"]: g["lr"]
        for g in parameterize(model2, "mssp", "adam", regime="II", base_shapes=BASE, lr=1.0)
    }
    assert groups2["blocks.0.w1"] == pytest.approx(1 / 8)
    assert model2.blocks[0].mult_agg == 1.0


def test_table_markdown_lists_every_role():
    text = table_markdown("adam", "II")
    for role in ("embed", "router", "w1", "w2", "readout", "aggregate", "branch"):
        assert f"| {role} |" in text
    assert "k^0.5" in text


# ---------------------------------------------------------------- dense case against mup
class _MupDense(nn.Module):
    """The M = K = 1 MoE model written with mup's layers (residual MLP, RMS pre-norm)."""

    def __init__(self, n, ne, depth, d_in=5, d_out=3):
        super().__init__()
        self.embed = nn.Linear(d_in, n, bias=False)
        self.w1 = nn.ModuleList(nn.Linear(n, ne, bias=False) for _ in range(depth))
        self.w2 = nn.ModuleList(nn.Linear(ne, n, bias=False) for _ in range(depth))
        self.readout = mup.MuReadout(n, d_out, bias=False)

    def forward(self, x):
        h = self.embed(x)
        for a, b in zip(self.w1, self.w2, strict=True):
            xb = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
            h = h + b(torch.relu(a(xb)))
        return self.readout(h)


def _mup_pair(n, base_n, depth=2):
    torch.manual_seed(0)
    ref = _MupDense(n, n, depth)
    mup.set_base_shapes(ref, _MupDense(base_n, base_n, depth))
    ours = _model({"N": n, "Ne": n, "M": 1, "K": 1, "L": depth})
    return ref, ours


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_dense_mup_matches_mup_package(optimizer):
    """M = K = 1: our muP learning rates and readout multiplier equal mup's, and so does f(x)."""
    n, base_n, lr = 32, 8, 0.01
    ref, ours = _mup_pair(n, base_n)
    base = {"N": base_n, "Ne": base_n, "M": 1, "K": 1, "L": 2}
    groups = parameterize(ours, "mup", optimizer, regime="I", base_shapes=base, lr=lr)
    ref_opt = (mup.MuAdam if optimizer == "adam" else mup.MuSGD)(ref.parameters(), lr=lr)
    ref_lr = {id(p): g["lr"] for g in ref_opt.param_groups for p in g["params"]}
    ours_lr = {g["name"]: g["lr"] for g in groups}
    pairs = {"embed": ref.embed.weight, "readout": ref.readout.weight}
    for i in range(2):
        pairs[f"blocks.{i}.w1"] = ref.w1[i].weight
        pairs[f"blocks.{i}.w2"] = ref.w2[i].weight
    for name, p in pairs.items():
        assert ours_lr[name] == pytest.approx(ref_lr[id(p)], rel=1e-12), name
    # same weights -> same function (the gate of a single expert is exactly 1)
    with torch.no_grad():
        ours.embed.copy_(ref.embed.weight)
        ours.readout.copy_(ref.readout.weight)
        for i, b in enumerate(ours.blocks):
            b.w1.copy_(ref.w1[i].weight.unsqueeze(0))
            b.w2.copy_(ref.w2[i].weight.unsqueeze(0))
    x = torch.randn(7, 5)
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-6)


def test_dense_readout_init_scale_matches_mup():
    """mup rescales the SP readout init by width_mult**0.5; our table's init exponent is +1/2.

    std ratio between widths 256 and 16 of our readout over mup's: both must be
    sqrt(16 / 256) * sqrt(16) = 1, estimated from 64 x 256 / 64 x 16 Gaussian/uniform draws
    (relative error of a std estimate from n draws ~ 1/sqrt(2n) < 0.05)."""
    stds = {}
    for n in (16, 256):
        torch.manual_seed(n)
        ref = mup.MuReadout(n, 64, bias=False)
        mup.set_base_shapes(ref, mup.MuReadout(16, 64, bias=False))
        model = MoEModel(3, 64, n=n, ne=n, m=1, k=1)
        base = {"N": 16, "Ne": 16, "M": 1, "K": 1, "L": 1}
        parameterize(model, "mup", "adam", regime="I", base_shapes=base, lr=1.0)
        stds[n] = (float(model.readout.detach().std()), float(ref.weight.detach().std()))
    ours_ratio = stds[256][0] / stds[16][0]
    ref_ratio = stds[256][1] / stds[16][1]
    assert ours_ratio == pytest.approx(ref_ratio, rel=0.15)
    assert ours_ratio == pytest.approx(math.sqrt(16 / 256) * 4, rel=0.15)


# ---------------------------------------------------------------- bad input
def test_unknown_names():
    model = _model(BASE)
    with pytest.raises(ValueError, match="unknown scheme 'mu'"):
        parameterize(model, "mu", "adam", regime="I", base_shapes=BASE, lr=1e-3)
    with pytest.raises(ValueError, match="unknown optimizer 'lion'"):
        parameterize(model, "mssp", "lion", regime="I", base_shapes=BASE, lr=1e-3)
    with pytest.raises(ValueError, match="unknown regime 'IV'"):
        parameterize(model, "mssp", "adam", regime="IV", base_shapes=BASE, lr=1e-3)
    with pytest.raises(ValueError, match="unknown scheme"):
        get_scheme("MSSP", "adam", "I")


def test_widths_not_matching_base():
    model = _model({**BASE, "M": 8})  # M differs, regime I scales only N and N_e
    with pytest.raises(ValueError, match=r"widths not matching base shapes: M=8 \(base 4\)"):
        parameterize(model, "mssp", "adam", regime="I", base_shapes=BASE, lr=1e-3)
    with pytest.raises(ValueError, match="lacks"):
        size_ratios(BASE, {"N": 8}, "I")
    with pytest.raises(ValueError, match=r"K .* must be <= M"):
        size_ratios(BASE, {**BASE, "K": 9}, "I")


def test_parameters_not_covered_are_listed():
    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.moe = MoELayer(8, 8, 4, 2)
            self.head = nn.Linear(8, 2)

    w = Wrapped()
    base = {**BASE, "L": 1}
    with pytest.raises(
        ValueError, match=r"not covered by the scheme: \['head.weight', 'head.bias'\]"
    ):
        parameterize(w, "mssp", "adam", regime="I", base_shapes=base, lr=1e-3)
    groups = parameterize(
        w,
        "mssp",
        "adam",
        regime="I",
        base_shapes=base,
        lr=1e-3,
        roles={"head.weight": "readout", "head.bias": "embed"},
    )
    assert [g["role"] for g in groups] == ["router", "w1", "w2", "readout", "embed"]
    with pytest.raises(ValueError, match="unknown role"):
        parameterize(
            w, "mssp", "adam", regime="I", base_shapes=base, lr=1e-3, roles={"head.weight": "x"}
        )


def test_bad_numbers_and_shapes():
    model = _model(BASE)
    for lr in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="lr must be"):
            parameterize(model, "mssp", "adam", regime="I", base_shapes=BASE, lr=lr)
    with pytest.raises(ValueError, match="K=5 > M=4"):
        MoEModel(3, 1, n=8, ne=8, m=4, k=5)
    with pytest.raises(ValueError, match="depth must be"):
        MoEModel(3, 1, n=8, ne=8, m=4, k=1, depth=0)
    with pytest.raises(ValueError, match="no MoELayer"):
        parameterize(nn.Linear(3, 3), "mssp", "adam", regime="I", base_shapes=BASE, lr=1e-3)
