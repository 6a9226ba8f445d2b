"""Small numeric helpers that several subpackages of shared_core share (private)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "HALF_DTYPES",
    "check_float_tensor",
    "check_number",
    "compute_dtype",
    "safe_div",
    "sign_keep_nan",
    "upcast",
]

HALF_DTYPES = (torch.float16, torch.bfloat16)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype arithmetic runs in: half precisions go to float32, the rest stay."""
    return torch.float32 if dtype in HALF_DTYPES else dtype


def upcast(x: Tensor) -> Tensor:
    """``x`` in :func:`compute_dtype` (no copy when it already is)."""
    return x.to(compute_dtype(x.dtype))


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


def check_float_tensor(x: object, what: str) -> Tensor:
    """Raise unless ``x`` is a real floating-point tensor; return it."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{what} expects a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{what} expects a real floating-point tensor, got dtype {x.dtype}")
    return x


def check_number(value: object, name: str, *, strictly_positive: bool) -> float:
    """Return ``value`` as a float; raise unless it is finite and > 0 (or >= 0)."""
    bound = "> 0" if strictly_positive else ">= 0"
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}") from None
    if not math.isfinite(v) or v < 0 or (strictly_positive and v == 0):
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return v
