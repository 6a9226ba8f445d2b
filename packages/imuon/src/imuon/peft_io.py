r"""Saving and loading peft adapters trained after :func:`imuon.lora.prepare_peft_for_imuon`.

The preparation folds :math:`-s B_0A_0` into each frozen base weight so that both factors can
start at full rank. The in-memory model is :math:`(W_0 - sB_0A_0) + sBA`, but peft's
``save_pretrained`` writes only ``(B, A)``, and loading that onto the original base gives
:math:`W_0 + sBA`: off by the whole offset. Two ways out, both exact to float rounding:

- **portable** (default of :func:`save_peft_adapter`): write the change relative to the
  original base, :math:`s(BA - B_0A_0) = s\,[B, -B_0]\,[A; A_0]` (a rank-``2r``
  adapter: ``r`` and ``lora_alpha`` doubled, rsLoRA's ``lora_alpha`` times :math:`\sqrt2`, so
  every layer keeps its scaling :math:`s`), as a plain peft adapter: anyone loads it with
  ``PeftModel.from_pretrained(original_base, path)``, no imuon needed. It is twice the
  size and, being rank ``2r``, not a point to resume IMuon training from.
- **resumable** (``portable=False``): the rank-``r`` adapter plus ``imuon_offsets.pt`` holding
  :math:`(B_0, A_0, s)`; :func:`load_peft_adapter` loads it and folds the offset into the new
  base again, giving back the model as it was in memory (same rank-``r`` pairs, so IMuon can
  continue). Plain peft loading of such a folder is wrong, as above.
"""

from __future__ import annotations

import copy
import math
import os
from typing import Any

import torch
from torch import Tensor, nn

from .lora import OFFSET_ATTR, base_weight, fold_delta, lora_layers

__all__ = ["OFFSETS_FILE", "load_peft_adapter", "save_peft_adapter"]

OFFSETS_FILE = "imuon_offsets.pt"
_FORMAT = "imuon-peft-offsets"


def _offsets(model: nn.Module) -> dict[str, dict[str, list[tuple[Tensor, Tensor, float]]]]:
    out = {}
    for name, mod in lora_layers(model):
        recorded = mod.__dict__.get(OFFSET_ATTR)
        if recorded:
            out[name] = recorded
    return out


def _adapter_dir(path: str | os.PathLike, adapter: str) -> str:
    # peft's layout: the "default" adapter at the root, any other one in a sub-folder
    return os.fspath(path) if adapter == "default" else os.path.join(os.fspath(path), adapter)


def _portable_state(model: nn.Module, adapter: str, offsets) -> dict[str, Tensor]:
    """The model's state dict with each offset pair's factors widened to ``[B, -B_0]`` and
    ``[A; A_0]`` (scaled so that the doubled config's ``s'`` gives back ``s``)."""
    # The doubled config scales alpha with r (_doubled_config), so each layer's scaling is
    # unchanged and the factors are written as they are.
    state = model.state_dict()
    for name, mod in lora_layers(model):
        if adapter not in mod.lora_A:
            continue
        pieces = offsets.get(name, {}).get(adapter, [])
        if not pieces:
            raise ValueError(
                f"save_peft_adapter(portable=True): layer {name!r} has no recorded offset for "
                f"adapter {adapter!r} (was prepare_peft_for_imuon run on this model?); every "
                "layer of the adapter must have one, since r doubles for all of them"
            )
        if len(pieces) != 1:
            raise ValueError(
                f"layer {name!r}: prepare_peft_for_imuon was applied {len(pieces)} times; the "
                "portable adapter has rank 2r and holds one offset; save with portable=False"
            )
        b0, a0, s0 = pieces[0]
        wa, wb = mod.lora_A[adapter].weight, mod.lora_B[adapter].weight
        s = float(mod.scaling[adapter])
        # the offset was folded with the scale of its time: s0 B0 A0 = s (s0 / s) B0 A0
        b0 = b0.to(wb) * (s0 / s) if s0 != s else b0.to(wb)
        for key, value in (
            (f"{name}.lora_A.{adapter}.weight", torch.cat([wa.detach(), a0.to(wa)], dim=0)),
            (f"{name}.lora_B.{adapter}.weight", torch.cat([wb.detach(), -b0], dim=1)),
        ):
            if key not in state:
                raise ValueError(f"unexpected peft layout: no state-dict key {key!r}")
            state[key] = value
    return state


def _doubled_config(config):
    """``config`` for the rank-2r adapter with every layer's scaling unchanged."""
    new = copy.deepcopy(config)
    grow = math.sqrt(2.0) if getattr(new, "use_rslora", False) else 2.0
    new.r = 2 * new.r
    new.lora_alpha = new.lora_alpha * grow
    if new.rank_pattern:
        new.rank_pattern = {k: 2 * v for k, v in new.rank_pattern.items()}
    if new.alpha_pattern:
        new.alpha_pattern = {k: v * grow for k, v in new.alpha_pattern.items()}
    return new


def save_peft_adapter(
    model: nn.Module,
    path: str | os.PathLike,
    *,
    portable: bool = True,
    adapter_name: str = "default",
    **kwargs: Any,
) -> None:
    """Save a peft model prepared by :func:`imuon.lora.prepare_peft_for_imuon` so that it
    reloads onto the *original* base model as it is in memory.

    Args:
        model: the ``PeftModel``.
        path: output folder (peft's layout: a non-default adapter goes to ``path/<name>``).
        portable: ``True``: a plain peft LoRA adapter of rank ``2r`` holding the whole change
            (loads with ``PeftModel.from_pretrained``); ``False``: the rank-``r`` adapter plus
            ``imuon_offsets.pt``, to be loaded with :func:`load_peft_adapter`.
        adapter_name: the adapter to save.
        kwargs: passed to ``save_pretrained``.

    A model that was never prepared is saved as peft would save it.
    """
    offsets = _offsets(model)
    if adapter_name not in model.peft_config:
        raise ValueError(
            f"unknown adapter {adapter_name!r}; the model has {sorted(model.peft_config)}"
        )
    if "selected_adapters" in kwargs or "state_dict" in kwargs:
        raise ValueError("save_peft_adapter chooses selected_adapters and state_dict itself")
    if not offsets:
        model.save_pretrained(path, selected_adapters=[adapter_name], **kwargs)
        return
    if not portable:
        model.save_pretrained(path, selected_adapters=[adapter_name], **kwargs)
        record = {
            name: [
                {"B": b.detach().cpu(), "A": a.detach().cpu(), "scaling": s}
                for b, a, s in per[adapter_name]
            ]
            for name, per in offsets.items()
            if adapter_name in per
        }
        torch.save(
            {"format": _FORMAT, "version": 1, "offsets": record},
            os.path.join(_adapter_dir(path, adapter_name), OFFSETS_FILE),
        )
        return
    state = _portable_state(model, adapter_name, offsets)
    original = model.peft_config[adapter_name]
    model.peft_config[adapter_name] = _doubled_config(original)
    try:
        model.save_pretrained(path, selected_adapters=[adapter_name], state_dict=state, **kwargs)
    finally:
        model.peft_config[adapter_name] = original


@torch.no_grad()
def load_peft_adapter(
    base_model: nn.Module, path: str | os.PathLike, *, adapter_name: str = "default", **kwargs
):
    """Load an adapter saved by :func:`save_peft_adapter` onto the original base model.

    ``PeftModel.from_pretrained(base_model, path, adapter_name=..., **kwargs)`` (pass
    ``is_trainable=True`` to continue training), then, when ``path`` holds
    ``imuon_offsets.pt`` (``portable=False``), the recorded offsets are folded into the base
    weights again exactly as :func:`imuon.lora.prepare_peft_for_imuon` did, and recorded on
    the layers, so the model is the one that was saved (and can be saved again).
    """
    from peft import PeftModel  # the peft extra; imported only when used

    model = PeftModel.from_pretrained(base_model, path, adapter_name=adapter_name, **kwargs)
    file = os.path.join(os.fspath(path), OFFSETS_FILE)
    if not os.path.exists(file):
        return model
    saved = torch.load(file, weights_only=True)
    if not isinstance(saved, dict) or saved.get("format") != _FORMAT:
        raise ValueError(f"{file} is not an imuon offsets file")
    layers = dict(lora_layers(model))
    missing = sorted(set(saved["offsets"]) - set(layers))
    if missing:
        raise ValueError(f"{file} names layers the loaded model does not have: {missing[:3]}")
    for name, pieces in saved["offsets"].items():
        mod = layers[name]
        for piece in pieces:
            b0, a0, s = piece["B"], piece["A"], float(piece["scaling"])
            base_weight(mod).sub_(fold_delta(mod, b0, a0, s))
            w = base_weight(mod)
            record = (b0.to(w.device), a0.to(w.device), s)
            mod.__dict__.setdefault(OFFSET_ATTR, {}).setdefault(adapter_name, []).append(record)
    return model
