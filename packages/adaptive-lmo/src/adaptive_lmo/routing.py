"""Which parameters get the matrix (LMO) update and which go to AdamW, and how matrices are viewed.

The split is the suite's one convention, :mod:`shared_core.routing` (imuon uses the same):
AdamW for every parameter with fewer than 2 dimensions, every ``nn.Embedding`` /
``nn.EmbeddingBag`` weight and anything tied to one, and the output head; the matrix update
for every other parameter with 2 or more dimensions. Override per parameter with ``route=``.
The head (``head=True``) is found by :func:`shared_core.routing.locate_head` (tied to an
embedding, a conventional head name, or the last Linear of an all-``nn.Sequential`` model;
otherwise a guess with a ``UserWarning``); :func:`find_head` reads it from one forward pass.

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

from shared_core.routing import (
    HEAD_NAMES,
    find_head,
    locate_head,
    route_module,
    takes_matrix_update,
)

__all__ = [
    "HEAD_NAMES",
    "ParamInfo",
    "default_route",
    "find_head",
    "locate_head",
    "matrix_shape",
    "scan_module",
]

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
    """``"lmo"`` or ``"adamw"`` by the suite's rule
    (:func:`shared_core.routing.takes_matrix_update`)."""
    embedded = {id(param)} if isinstance(module, nn.Embedding | nn.EmbeddingBag) else set()
    return "lmo" if takes_matrix_update(param, module, head, embedded) else "adamw"


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
        head: True (default: :func:`shared_core.routing.locate_head`), a module name, or
            None/False (no head exclusion).
    """
    sides = {"lmo": True, "adamw": False, None: None}

    def side(name: str, p: Tensor, mod: nn.Module) -> bool | None:
        algo = route(name, p, mod)
        if algo not in sides:
            raise ValueError(f"route returned {algo!r} for {name}; expected 'lmo' or 'adamw'")
        return sides[algo]

    out: list[ParamInfo] = []
    for r in route_module(model, side if route is not None else None, head, owner="AdaptiveLMO"):
        mod, p = r.module, r.param
        if not r.matrix:
            view = "vector"
        elif _is_conv(mod) and p is getattr(mod, "weight", None):
            view = "conv"
        elif p.ndim == 2:
            view = "matrix"
        else:
            view = "batched"
        out.append(ParamInfo(r.name, p, mod, "lmo" if r.matrix else "adamw", view))
    return out
