"""Which parameters get the matrix (LMO) update and which go to AdamW, and how matrices are viewed.

Default rule for an ``nn.Module`` (override per parameter with ``route=``):

- AdamW: every parameter with fewer than 2 dimensions (biases, norm gains), every
  ``nn.Embedding``/``nn.EmbeddingBag`` weight and anything tied to one, and the output head:
  the weight of the last ``nn.Linear`` in ``model.modules()`` order (``head="name"`` names
  another module, ``head=None`` keeps the last Linear on the matrix update);
- matrix update: every other parameter with 2 or more dimensions.

Matrix views: a weight of an ``nn.Conv*`` module is viewed as ``W.reshape(out, -1)`` (one
matrix: output channels x (input channels * kernel)); any other parameter with 3 or more
dimensions is a batch of matrices over its leading dimensions (``(E, out, in)`` for stacked
MoE experts, each expert transformed on its own). A param group may force ``"matrix_view"``
to ``"conv"`` or ``"batched"``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor, nn

__all__ = ["ParamInfo", "default_route", "matrix_shape", "scan_module"]

VIEWS = ("auto", "conv", "batched")


@dataclass
class ParamInfo:
    """One parameter of a model: its name, owning module, algorithm and matrix view."""

    name: str
    param: Tensor
    module: nn.Module | None
    algorithm: str  # "lmo" or "adamw"
    view: str  # "matrix", "conv", "batched" or "vector"


def matrix_shape(shape: tuple[int, ...], view: str) -> tuple[int, ...]:
    """The shape the matrix update works on: ``(m, n)`` or ``(..., m, n)`` for batched."""
    if len(shape) < 2:
        raise ValueError(f"a matrix update needs a parameter with >= 2 dims, got shape {shape}")
    if view == "conv":
        n = 1
        for k in shape[1:]:
            n *= k
        return (shape[0], n)
    return tuple(shape)


def _is_conv(module: nn.Module | None) -> bool:
    return isinstance(module, nn.modules.conv._ConvNd)


def default_route(
    name: str, param: Tensor, module: nn.Module | None, head: nn.Module | None
) -> str:
    """``"lmo"`` or ``"adamw"`` by the module docstring's default rule."""
    if param.ndim < 2:
        return "adamw"
    if isinstance(module, nn.Embedding | nn.EmbeddingBag):
        return "adamw"
    if head is not None and module is head:
        return "adamw"
    return "lmo"


def scan_module(
    model: nn.Module,
    route: Callable[[str, Tensor, nn.Module], str | None] | None = None,
    head: str | bool | None = True,
) -> list[ParamInfo]:
    """Classify every trainable parameter of ``model`` (each tensor once, first owner wins).

    Args:
        model: the model.
        route: optional ``(name, param, module) -> "lmo" | "adamw" | None``; None falls back
            to the default rule.
        head: True (default: the last ``nn.Linear`` is the head), a module name, or None/False
            (no head exclusion).
    """
    head_mod: nn.Module | None = None
    if head is True:
        for m in model.modules():
            if isinstance(m, nn.Linear):
                head_mod = m
    elif isinstance(head, str):
        mods = dict(model.named_modules())
        if head not in mods:
            raise ValueError(f"head={head!r} is not a module of the model")
        head_mod = mods[head]
    elif head not in (None, False):
        raise ValueError(f"head must be True, a module name or None, got {head!r}")
    embedded = {
        id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding | nn.EmbeddingBag)
    }
    seen: set[int] = set()
    out: list[ParamInfo] = []
    for mod_name, mod in model.named_modules():
        for p_name, p in mod.named_parameters(recurse=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            name = f"{mod_name}.{p_name}" if mod_name else p_name
            algo = route(name, p, mod) if route is not None else None
            if algo is None:
                algo = default_route(name, p, mod, head_mod)
                if id(p) in embedded:
                    algo = "adamw"
            if algo not in ("lmo", "adamw"):
                raise ValueError(f"route returned {algo!r} for {name}; expected 'lmo' or 'adamw'")
            if algo == "lmo" and p.ndim < 2:
                raise ValueError(f"route sent {name} (shape {tuple(p.shape)}) to the matrix update")
            if algo == "adamw":
                view = "vector"
            elif _is_conv(mod) and p is getattr(mod, "weight", None):
                view = "conv"
            elif p.ndim == 2:
                view = "matrix"
            else:
                view = "batched"
            out.append(ParamInfo(name, p, mod, algo, view))
    return out
