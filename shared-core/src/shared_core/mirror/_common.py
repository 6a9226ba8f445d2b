"""Input checks and dtype helpers shared by the mirror maps."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._numeric import check_float_tensor, check_number, compute_dtype, safe_div, upcast

__all__ = [
    "check_lr",
    "check_same_shape",
    "check_vectors",
    "compute_dtype",
    "safe_div",
    "simplex_tol",
    "upcast",
]


def check_vectors(x: object, what: str) -> Tensor:
    """Raise unless ``x`` is a real floating tensor with at least one axis; return it."""
    check_float_tensor(x, what)
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
    return check_number(lr, "lr", strictly_positive=True)


def simplex_tol(dtype: torch.dtype, d: int) -> float:
    """How far from 1 the sum of a normalised ``d``-vector of this dtype may round.

    Normalising in floating point leaves an error that grows like a random walk over the
    entries, so the bound scales with sqrt(d) ulps.
    """
    return 8.0 * math.sqrt(max(d, 1)) * torch.finfo(dtype).eps
