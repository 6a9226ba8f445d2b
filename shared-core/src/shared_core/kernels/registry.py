"""The list of kernels, with what the GPU check and the tests need to exercise each one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["KernelSpec"]


@dataclass(frozen=True)
class KernelSpec:
    """One Triton kernel beside its reference.

    Attributes:
        op: the ``torch.library`` op (dispatches by device).
        reference: the plain-torch function of the same arguments.
        launcher: the Triton launcher (CUDA tensors, or CPU ones under the interpreter).
        example: ``example(device, dtype, generator) -> args`` draws random arguments of an
            awkward size (no multiple of any block), never zeros.
        dtypes: the dtypes the kernel supports.
        rtol: dtype -> the relative Frobenius error against a float64 reference that passes.
    """

    op: Callable[..., Any]
    reference: Callable[..., Any]
    launcher: Callable[..., Any]
    example: Callable[[torch.device, torch.dtype, torch.Generator], tuple[Any, ...]]
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)
    rtol: dict[torch.dtype, float] = field(
        default_factory=lambda: {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}
    )
