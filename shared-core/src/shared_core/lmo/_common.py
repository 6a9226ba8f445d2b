"""Input checks and dtype helpers shared by every norm of :mod:`shared_core.lmo`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "Dim",
    "check_matrix",
    "check_radius",
    "check_tensor",
    "compute_dtype",
    "normalize_dim",
    "safe_div",
    "sign_keep_nan",
    "upcast",
]

#: A reduction axis spec for vector norms: one axis, several, or ``None`` for all of them.
Dim = int | Sequence[int] | None

_HALF = (torch.float16, torch.bfloat16)


def check_tensor(G: object, what: str) -> Tensor:
    """Raise unless ``G`` is a real floating-point tensor; return it."""
    if not isinstance(G, Tensor):
        raise TypeError(f"{what} expects a torch.Tensor, got {type(G).__name__}")
    if not G.is_floating_point():
        raise ValueError(f"{what} expects a real floating-point tensor, got dtype {G.dtype}")
    return G


def check_matrix(G: object, what: str) -> Tensor:
    """Raise unless ``G`` is a floating tensor of shape ``(..., m, n)``; return it."""
    G = check_tensor(G, what)
    if G.ndim < 2:
        raise ValueError(
            f"{what} is a matrix norm and needs a tensor of shape (..., m, n); "
            f"got a {G.ndim}-D tensor of shape {tuple(G.shape)}"
        )
    return G


def check_radius(radius: object) -> float:
    """Return ``radius`` as a float; raise unless it is a finite number >= 0."""
    try:
        r = float(radius)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"radius must be a finite number >= 0, got {radius!r}") from None
    if not math.isfinite(r) or r < 0:
        raise ValueError(f"radius must be a finite number >= 0, got {radius!r}")
    return r


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype arithmetic runs in: half precisions go to float32, the rest stay."""
    return torch.float32 if dtype in _HALF else dtype


def upcast(G: Tensor) -> Tensor:
    """``G`` in :func:`compute_dtype` (no copy when it already is)."""
    return G.to(compute_dtype(G.dtype))


def safe_div(num: Tensor, den: Tensor) -> Tensor:
    """``num / den`` with ``0`` where ``den == 0``.

    The test is ``den == 0`` rather than ``den > 0`` on purpose: a NaN denominator must give a
    NaN result, so that a NaN gradient is never turned silently into a zero step.
    """
    zero = den == 0
    return torch.where(zero, torch.zeros_like(num), num / torch.where(zero, 1, den))


def sign_keep_nan(x: Tensor) -> Tensor:
    """``sign(x)`` that maps NaN to NaN (``torch.sign`` maps it to 0)."""
    return torch.where(torch.isnan(x), x, torch.sign(x))


def normalize_dim(dim: Dim, ndim: int, what: str) -> tuple[int, ...]:
    """Axes of a reduction as sorted non-negative ints (``None``: every axis)."""
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if not dims:
        raise ValueError(f"{what}: dim must name at least one axis, got {dim!r}")
    out = []
    for d in dims:
        if not isinstance(d, int) or isinstance(d, bool):
            raise ValueError(f"{what}: dim entries must be ints, got {dim!r}")
        if not -ndim <= d < ndim:
            raise ValueError(f"{what}: dim {d} is out of range for a {ndim}-D tensor")
        out.append(d % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"{what}: dim {dim!r} names an axis twice")
    return tuple(sorted(out))
