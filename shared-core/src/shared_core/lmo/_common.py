"""Input checks and dtype helpers shared by every norm of :mod:`shared_core.lmo`."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from .._numeric import (
    check_float_tensor,
    check_number,
    compute_dtype,
    safe_div,
    sign_keep_nan,
    upcast,
)

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


def check_tensor(G: object, what: str) -> Tensor:
    """Raise unless ``G`` is a real floating-point tensor; return it."""
    return check_float_tensor(G, what)


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
    return check_number(radius, "radius", strictly_positive=False)


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
