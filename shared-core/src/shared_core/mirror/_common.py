"""Input checks and dtype helpers shared by the mirror maps."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "check_lr",
    "check_same_shape",
    "check_vectors",
    "compute_dtype",
    "safe_div",
    "simplex_tol",
    "upcast",
]

_HALF = (torch.float16, torch.bfloat16)


def check_vectors(x: object, what: str) -> Tensor:
    """Raise unless ``x`` is a real floating tensor with at least one axis; return it."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{what} expects a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{what} expects a real floating-point tensor, got dtype {x.dtype}")
    if x.ndim == 0:
        raise ValueError(f"{what} expects vectors along the last axis; got a 0-D tensor")
    return x


def check_same_shape(x: Tensor, g: Tensor, what: str) -> None:
    """Raise unless the point and the gradient of a step have the same shape."""
    if not isinstance(g, Tensor):
        raise TypeError(f"{what} expects the gradient as a torch.Tensor, got {type(g).__name__}")
    if g.shape != x.shape:
        raise ValueError(
            f"{what}: the gradient's shape {tuple(g.shape)} differs from the point's "
            f"{tuple(x.shape)}"
        )


def check_lr(lr: object) -> float:
    """Return the step size as a float; raise unless it is a finite number > 0."""
    try:
        value = float(lr)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    return value


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half precisions compute in float32, the rest in their own dtype."""
    return torch.float32 if dtype in _HALF else dtype


def upcast(x: Tensor) -> Tensor:
    """``x`` in :func:`compute_dtype` (no copy when it already is)."""
    return x.to(compute_dtype(x.dtype))


def safe_div(num: Tensor, den: Tensor) -> Tensor:
    """``num / den`` with 0 where ``den == 0``; a NaN denominator still gives NaN."""
    zero = den == 0
    return torch.where(zero, torch.zeros_like(num), num / torch.where(zero, 1, den))


def simplex_tol(dtype: torch.dtype, d: int) -> float:
    """How far from 1 the sum of a normalised ``d``-vector of this dtype may round.

    Normalising in floating point leaves an error that grows like a random walk over the
    entries, so the bound scales with sqrt(d) ulps.
    """
    return 8.0 * math.sqrt(max(d, 1)) * torch.finfo(dtype).eps
