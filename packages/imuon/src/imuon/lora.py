r"""LoRA as a fixed-rank point: ``LoRALinear``, param groups, and peft pair discovery.

A LoRA update :math:`\Delta W = s\,BA` (peft's names and shapes: ``lora_B`` (out, r),
``lora_A`` (r, in)) is a point of the rank-r manifold; IMuon steps it as one point of the
GL(r) quotient, so its trajectory does not depend on how the product is split between the
factors.

The usual LoRA initialisation sets one factor to zero, which is *not* a rank-r point (the
quotient geometry needs both factors of full column rank). Both helpers here therefore start
from two random full-rank factors and fold :math:`-sA_0B_0^\top` into the frozen base weight, so
that the initial network function is unchanged (the same trick as PiSSA-style offsets).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "LoRALinear",
    "find_lora_pairs",
    "imuon_param_groups",
    "peft_param_groups",
    "prepare_peft_for_imuon",
]


class LoRALinear(nn.Module):
    r"""``y = x W_0^\top + b + s\,(x A^\top) B^\top`` with frozen ``W_0`` and trainable factors
    ``lora_A`` = :math:`A` (r, in) and ``lora_B`` = :math:`B` (out, r), as in peft
    (:math:`\Delta W = sBA`; IMuon takes the pair with ``factor_layout="peft"``).

    Args:
        in_features, out_features: layer sizes.
        rank: ``r``, ``1 <= r <= min(in, out)``.
        alpha: scaling numerator; ``s = alpha / r``.
        bias: trainable bias (routed to AdamW by :func:`imuon_param_groups`).
        init_std: std of the random factors (both nonzero; see the module docstring).

    Example:
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> base = nn.Linear(6, 4)
        >>> layer = LoRALinear.from_linear(base, rank=2)
        >>> x = torch.randn(3, 6)
        >>> torch.allclose(layer(x), base(x), atol=1e-6)
        True
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        rank: int,
        alpha: float | None = None,
        bias: bool = True,
        init_std: float = 0.02,
    ):
        super().__init__()
        if not 1 <= rank <= min(in_features, out_features):
            raise ValueError(
                f"rank={rank} must satisfy 1 <= rank <= min(in_features={in_features}, "
                f"out_features={out_features})"
            )
        self.in_features, self.out_features, self.rank = in_features, out_features, rank
        self.scaling = (alpha if alpha is not None else rank) / rank
        self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        # drawn in this order and shape so that a seed gives the same product as before the
        # factors took peft's names (the old A (out, r) is lora_B, the old B (in, r) is lora_A^T)
        self.lora_B = nn.Parameter(torch.randn(out_features, rank) * init_std)
        self.lora_A = nn.Parameter((torch.randn(in_features, rank) * init_std).T.contiguous())
        self._fold_offset()

    @torch.no_grad()
    def _fold_offset(self) -> None:
        self.weight.sub_(self.scaling * self.lora_B @ self.lora_A)

    @classmethod
    def from_linear(cls, linear: nn.Linear, rank: int, alpha: float | None = None, **kw):
        """Wrap an existing ``nn.Linear`` (its weight is copied and frozen)."""
        layer = cls(
            linear.in_features,
            linear.out_features,
            rank,
            alpha,
            bias=linear.bias is not None,
            **kw,
        )
        with torch.no_grad():
            layer.weight.copy_(linear.weight)
            if linear.bias is not None:
                layer.bias.copy_(linear.bias)
            layer._fold_offset()
        layer.to(linear.weight.device, linear.weight.dtype)
        return layer

    def delta(self) -> Tensor:
        """The current update ``s B A`` (``lora_B @ lora_A``)."""
        return self.scaling * self.lora_B @ self.lora_A

    def forward(self, x: Tensor) -> Tensor:
        y = nn.functional.linear(x, self.weight, self.bias)
        return y + self.scaling * (x @ self.lora_A.T) @ self.lora_B.T


def imuon_param_groups(model: nn.Module, **options: Any) -> list[dict[str, Any]]:
    """Param groups for :class:`imuon.IMuon`: one fixed-rank group holding every
    :class:`LoRALinear` pair as ``(lora_B, lora_A)`` (``factor_layout="peft"``), one
    ``"auto"`` group with the other trainable tensors.

    ``options`` are set on the fixed-rank group (e.g. ``lr=``, ``norm=``).
    """
    pairs, seen = [], set()
    for mod in model.modules():
        if isinstance(mod, LoRALinear):
            pairs += [mod.lora_B, mod.lora_A]
            seen |= {id(mod.lora_A), id(mod.lora_B)}
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in seen]
    groups = []
    if pairs:
        groups.append(
            {"params": pairs, "manifold": "fixed_rank", "factor_layout": "peft", **options}
        )
    if rest:
        groups.append({"params": rest, "manifold": "auto"})
    return groups


def find_lora_pairs(model: nn.Module) -> list[tuple[str, Tensor, Tensor]]:
    """``(name, lora_B.weight, lora_A.weight)`` for every LoRA adapter of a peft model.

    peft's ``Linear`` LoRA layers hold ``lora_A[adapter]`` (``nn.Linear(in, r)``, weight
    ``(r, in)``) and ``lora_B[adapter]`` (weight ``(out, r)``), with ``delta W = s B A``; the
    pair is an IMuon fixed-rank point with ``factor_layout="peft"``. Only duck typing is used
    (no import of peft), so any module with the same attributes is found.
    """
    out = []
    for name, mod in model.named_modules():
        la, lb = getattr(mod, "lora_A", None), getattr(mod, "lora_B", None)
        if not isinstance(la, nn.ModuleDict) or not isinstance(lb, nn.ModuleDict):
            continue
        for adapter in la:
            if adapter in lb and hasattr(la[adapter], "weight") and la[adapter].weight.ndim == 2:
                out.append((f"{name}.{adapter}", lb[adapter].weight, la[adapter].weight))
    return out


# prepare_peft_for_imuon records the factors it folds into the base weight here (on each LoRA
# layer, per adapter), so that imuon.peft_io can save an adapter that reloads correctly.
OFFSET_ATTR = "imuon_offsets"


def lora_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(name, module)`` of every peft-style LoRA layer (``lora_A``/``lora_B`` ModuleDicts)."""
    out = []
    for name, mod in model.named_modules():
        la, lb = getattr(mod, "lora_A", None), getattr(mod, "lora_B", None)
        if isinstance(la, nn.ModuleDict) and isinstance(lb, nn.ModuleDict):
            out.append((name, mod))
    return out


def base_weight(mod: nn.Module) -> Tensor:
    base = mod.get_base_layer() if hasattr(mod, "get_base_layer") else mod.base_layer
    return base.weight


def fold_delta(mod: nn.Module, wb: Tensor, wa: Tensor, scale: float) -> Tensor:
    """``scale * wb @ wa`` in the base weight's layout and dtype, as folded into it.

    Computed in the wider of the model's and the factors' dtypes (at least float32): a float32
    fold would move a float64 model's function by float32 round-off. The same function redoes
    the fold when an adapter is reloaded, so the base weight is rebuilt to the last bit.
    """
    w = base_weight(mod)
    dt = torch.promote_types(torch.promote_types(w.dtype, wb.dtype), wa.dtype)
    dt = torch.promote_types(dt, torch.float32)
    delta = (wb.to(w.device, dt) @ wa.to(w.device, dt)) * scale
    if getattr(mod, "fan_in_fan_out", False):
        delta = delta.T
    return delta.to(w.dtype)


@torch.no_grad()
def prepare_peft_for_imuon(model: nn.Module, init_std: float = 0.02, seed: int = 0) -> int:
    """Give every peft LoRA pair two full-rank factors without changing the model's function.

    peft zero-initialises ``lora_B``; this draws it at random and subtracts
    ``scaling * lora_B @ lora_A`` from the (frozen) base weight. Returns the number of pairs.
    Needs the layers' ``base_layer`` and ``scaling`` attributes (peft's LoRA ``Linear``).

    The base weight no longer equals the pretrained one, so ``model.save_pretrained`` alone
    writes an adapter that is wrong on the original base: save with
    :func:`imuon.peft_io.save_peft_adapter` (the folded factors are recorded on each layer for
    it), or merge with ``merge_and_unload``.
    """
    gen = torch.Generator().manual_seed(seed)
    count = 0
    for _, mod in lora_layers(model):
        la, lb = mod.lora_A, mod.lora_B
        if any(getattr(mod, "use_dora", {}).get(ad, False) for ad in la):
            raise ValueError(
                "prepare_peft_for_imuon: DoRA adapters (use_dora=True) normalise by the base "
                "weight's column norms, which the fold would change; use plain LoRA"
            )
        for adapter in la:
            wa, wb = la[adapter].weight, lb[adapter].weight
            new_b = torch.randn(wb.shape, generator=gen) * init_std
            wb.copy_(new_b.to(wb))
            if float(wa.norm()) == 0:
                wa.copy_((torch.randn(wa.shape, generator=gen) * init_std).to(wa))
            scale = float(mod.scaling[adapter])
            base_weight(mod).sub_(fold_delta(mod, wb, wa, scale))
            offsets = mod.__dict__.setdefault(OFFSET_ATTR, {})
            offsets.setdefault(adapter, []).append(
                (wb.detach().clone(), wa.detach().clone(), scale)
            )
            count += 1
    return count


def peft_param_groups(model: nn.Module, **options: Any) -> list[dict[str, Any]]:
    """Param groups for :class:`imuon.IMuon` from a peft model: the LoRA pairs as one
    fixed-rank group (``factor_layout="peft"``), other trainable tensors routed ``"auto"``."""
    pairs = find_lora_pairs(model)
    flat = [t for _, b, a in pairs for t in (b, a)]
    ids = {id(t) for t in flat}
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in ids]
    groups = []
    if flat:
        groups.append(
            {"params": flat, "manifold": "fixed_rank", "factor_layout": "peft", **options}
        )
    if rest:
        groups.append({"params": rest, "manifold": "auto"})
    return groups
