"""Argument checks and dtype rules shared by the modules of :mod:`shared_core.polar`."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["check_finite", "check_matrix", "check_symmetric", "exact_dtype", "iteration_dtype"]

_ITER_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def check_matrix(G: object, what: str, *, square: bool = False) -> Tensor:
    """Raise unless ``G`` is a real floating tensor of shape ``(..., m, n)``; return it."""
    if not isinstance(G, Tensor):
        raise TypeError(f"{what} expects a torch.Tensor, got {type(G).__name__}")
    if not G.is_floating_point():
        raise ValueError(f"{what} expects a real floating-point tensor, got dtype {G.dtype}")
    if G.ndim < 2:
        raise ValueError(f"{what} needs a tensor of shape (..., m, n), got shape {tuple(G.shape)}")
    if square and G.shape[-1] != G.shape[-2]:
        raise ValueError(f"{what} needs square matrices, got shape {tuple(G.shape)}")
    return G


def check_finite(G: Tensor, what: str) -> None:
    """Raise ``ValueError`` if ``G`` holds NaN or inf (one reduction; a sync on CUDA)."""
    if not bool(torch.isfinite(G).all()):
        raise ValueError(f"{what} got non-finite input (NaN or inf); its polar factor is undefined")


def iteration_dtype(G: Tensor, dtype: torch.dtype | None) -> torch.dtype:
    """The dtype Newton-Schulz iterates in: bfloat16 on CUDA, float32 elsewhere, unless given."""
    if dtype is None:
        return torch.bfloat16 if G.device.type == "cuda" else torch.float32
    if dtype not in _ITER_DTYPES:
        raise ValueError(
            f"dtype must be one of float32, float64, bfloat16, float16 (or None), got {dtype!r}"
        )
    return dtype


def exact_dtype(G: Tensor, dtype: torch.dtype | None) -> torch.dtype:
    """The dtype of the SVD / eigh paths: float64 stays, everything else is float32."""
    if dtype is None:
        return torch.float64 if G.dtype == torch.float64 else torch.float32
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(
            f"the exact (SVD/eigh) paths compute in float32 or float64, got dtype={dtype!r}"
        )
    return dtype


def check_symmetric(X: Tensor, what: str, rtol: float | None = None) -> None:
    r"""Raise ``ValueError`` unless :math:`\max|X - X^\top| \le \text{rtol} \cdot \max|X|`.

    The default ``rtol`` is the square root of the dtype's machine epsilon (3.5e-4 in float32,
    1.5e-8 in float64): products like ``A @ A.mT`` pass, a matrix that is not symmetric by
    construction does not.
    """
    if rtol is None:
        rtol = torch.finfo(X.dtype).eps ** 0.5
    asym = (X - X.mT).abs().amax(dim=(-2, -1))
    scale = X.abs().amax(dim=(-2, -1))
    bad = asym > rtol * scale
    if bool(bad.any()):
        worst = float((asym / scale.clamp_min(torch.finfo(X.dtype).tiny)).max())
        raise ValueError(
            f"{what} needs symmetric matrices; got max|X - X^T| / max|X| = {worst:.3e} "
            f"> rtol = {rtol:.1e}"
        )
