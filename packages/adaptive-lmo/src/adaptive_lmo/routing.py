"""Which parameters get the matrix (LMO) update and which go to AdamW, and how matrices are viewed.

Default rule for an ``nn.Module`` (override per parameter with ``route=``):

- AdamW: every parameter with fewer than 2 dimensions (biases, norm gains), every
  ``nn.Embedding``/``nn.EmbeddingBag`` weight and anything tied to one, and the output head;
- matrix update: every other parameter with 2 or more dimensions.

The output head (``head=True``, :func:`locate_head`) is identified, in this order, as the
``nn.Linear`` whose weight is tied to an embedding; the one ``nn.Linear`` whose own name is a
conventional head name (:data:`HEAD_NAMES`, e.g. ``lm_head``, ``head``, ``classifier``); in a
model built only of ``nn.Sequential`` containers, the last ``nn.Linear`` (registration order
is execution order there). Otherwise the position of a layer in the graph is not known from
the module tree, the last registered ``nn.Linear`` is a guess, and a ``UserWarning`` says so:
a model that registers ``self.head`` before its body would otherwise send its real head to
the matrix update and a hidden layer to AdamW. :func:`find_head` reads the head from one
forward pass instead (the ``nn.Linear`` whose output is the model's output); pass its result,
or any module name, as ``head="name"``, or ``head=None`` to keep every Linear on the matrix
update.

Matrix views: a weight of an ``nn.Conv*`` module is viewed as ``W.reshape(out, -1)`` (one
matrix: output channels x (input channels * kernel)); any other parameter with 3 or more
dimensions is a batch of matrices over its leading dimensions (``(E, out, in)`` for stacked
MoE experts, each expert transformed on its own). A param group may force ``"matrix_view"``
to ``"conv"`` or ``"batched"``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "HEAD_NAMES",
    "ParamInfo",
    "default_route",
    "find_head",
    "locate_head",
    "matrix_shape",
    "scan_module",
]

#: Own names (last component of the module path) read as "this Linear is the output head".
HEAD_NAMES = ("lm_head", "head", "classifier", "fc_out", "readout", "output_layer", "output_head")

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
        head: True (default: :func:`locate_head`), a module name, or None/False (no head
            exclusion).
    """
    head_mod: nn.Module | None = None
    if head is True:
        head_mod = locate_head(model, warn=True)
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


def _only_sequential(model: nn.Module) -> bool:
    """Every container (module with children) is an ``nn.Sequential``: execution order is
    registration order."""
    return all(isinstance(m, nn.Sequential) for m in model.modules() if next(m.children(), None))


def locate_head(model: nn.Module, warn: bool = False) -> nn.Module | None:
    """The output head by the module docstring's rule (None when the model has no Linear).

    With ``warn``, a ``UserWarning`` names the module when the choice is a guess (the last
    registered ``nn.Linear`` of a model whose graph order the module tree does not give).
    """
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        return None
    embedded = {
        id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding | nn.EmbeddingBag)
    }
    tied = [m for _, m in linears if id(m.weight) in embedded]
    if len(tied) == 1:
        return tied[0]
    named = [m for n, m in linears if n.rsplit(".", 1)[-1] in HEAD_NAMES]
    if len(named) == 1:
        return named[0]
    if _only_sequential(model):
        return linears[-1][1]
    name, mod = linears[-1]
    if warn:
        warnings.warn(
            f"AdaptiveLMO: guessing the output head as {name!r}, the last nn.Linear registered "
            "(the module tree does not say which Linear produces the output). If that is "
            "wrong, the real head gets the matrix update and this layer AdamW. Pass "
            "head='<module name>' (adaptive_lmo.routing.find_head(model, example_input) "
            "reads it from a forward pass) or head=None to silence this.",
            stacklevel=4,
        )
    return mod


def _tensors(out: Any) -> list[Tensor]:
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, list | tuple):
        return [t for o in out for t in _tensors(o)]
    return []


def find_head(model: nn.Module, *args: Any, **kwargs: Any) -> str | None:
    """Name of the output head, read from one forward pass ``model(*args, **kwargs)``.

    The head is the ``nn.Linear`` whose output tensor is (one of) the model's outputs; when
    the output is computed further (a reshape, a scale), the last ``nn.Linear`` that ran.
    Runs under ``torch.no_grad()``; returns None when no ``nn.Linear`` ran.

    Example:
        >>> class Net(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.out = nn.Linear(8, 2)  # registered first, runs last
        ...         self.body = nn.Linear(4, 8)
        ...     def forward(self, x):
        ...         return self.out(torch.relu(self.body(x)))
        >>> find_head(Net(), torch.randn(3, 4))
        'out'
    """
    names = {m: n for n, m in model.named_modules()}
    ran: list[tuple[str, Tensor]] = []

    def hook(mod: nn.Module, inputs: tuple, output: Any) -> None:
        if isinstance(output, Tensor):
            ran.append((names[mod], output))

    handles = [m.register_forward_hook(hook) for m in names if isinstance(m, nn.Linear)]
    try:
        with torch.no_grad():
            out = model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    if not ran:
        return None
    outs = {id(t) for t in _tensors(out)}
    direct = [n for n, t in ran if id(t) in outs]
    return direct[-1] if direct else ran[-1][0]
