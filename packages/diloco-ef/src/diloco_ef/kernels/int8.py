r"""Fused int8 absmax quantization: divide by the scale, round, clamp, cast, in one pass.

.. math:: q_i = \mathrm{clamp}\big(\mathrm{rint}(x_i / \sigma),\ -127,\ 127\big) \in \mathbb{Z}_8,

with :math:`\sigma = \max_j |x_j| / 127` supplied by the caller and :math:`\mathrm{rint}` rounding
half to even (as ``torch.round``). The torch expression makes three temporaries of size d in
float; the kernel reads ``x`` once and writes one byte per entry.

- :func:`int8_quantize_reference`: plain torch (CPU path, oracle);
- :func:`int8_quantize_triton`: the Triton launcher (float32/bf16/fp16 inputs);
- :func:`int8_quantize`: the op ``diloco_ef::int8_quantize``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from shared_core.kernels import HAS_TRITON, autotune_configs, check_launchable, require_triton

if HAS_TRITON:
    import triton
    import triton.language as tl

__all__ = ["int8_quantize", "int8_quantize_reference", "int8_quantize_triton"]

_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check(x: Tensor, scale: float) -> None:
    if not x.is_floating_point():
        raise ValueError(f"int8_quantize takes floating tensors, got {x.dtype}")
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale!r}")


def int8_quantize_reference(x: Tensor, scale: float) -> Tensor:
    """int8 levels of ``x / scale`` (float32 arithmetic, float64 for float64 inputs).

    Example:
        >>> int8_quantize_reference(torch.tensor([1.0, -2.5, 300.0]), 1.0)
        tensor([  1,  -2, 127], dtype=torch.int8)
    """
    _check(x, scale)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    y = x.to(work) / torch.tensor(scale, dtype=work)
    return torch.round(y).clamp_(-127, 127).to(torch.int8)


if HAS_TRITON:

    @triton.autotune(
        configs=autotune_configs(
            [
                triton.Config({"BLOCK": 1024}, num_warps=4),
                triton.Config({"BLOCK": 4096}, num_warps=8),
            ]
        ),
        key=["n"],
    )
    @triton.jit
    def _int8_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        # Correctly rounded division, so the result matches torch bit for bit on the GPU too.
        y = tl.div_rn(x, scale)
        # Round half to even by hand (portable to the interpreter): floor(y + 0.5), and step
        # back by one where y sat exactly on a half and that landed on an odd integer.
        r = tl.floor(y + 0.5)
        tie = (r - y) == 0.5
        odd = (r - 2.0 * tl.floor(r * 0.5)) == 1.0
        r = tl.where(tie & odd, r - 1.0, r)
        r = tl.minimum(tl.maximum(r, -127.0), 127.0)
        tl.store(out_ptr + offs, r.to(tl.int8), mask=mask)


def int8_quantize_triton(x: Tensor, scale: float) -> Tensor:
    """Launch the Triton kernel (float32 arithmetic; float32/bf16/fp16 inputs)."""
    require_triton("int8_quantize_triton")
    check_launchable(x)
    _check(x, scale)
    if x.dtype not in _TRITON_DTYPES:
        raise ValueError(f"int8_quantize_triton takes {_TRITON_DTYPES}, got {x.dtype}")
    xf = x.contiguous().view(-1)
    out = torch.empty(xf.shape, dtype=torch.int8, device=x.device)
    n = xf.numel()
    if n:
        s32 = float(torch.tensor(scale, dtype=torch.float32))

        def grid(meta):
            return (triton.cdiv(n, meta["BLOCK"]),)

        _int8_kernel[grid](xf, out, n, s32)
    return out.view(x.shape)


@torch.library.custom_op("diloco_ef::int8_quantize", mutates_args=())
def int8_quantize(x: Tensor, scale: float) -> Tensor:
    r"""int8 levels :math:`\mathrm{clamp}(\mathrm{rint}(x/\sigma), -127, 127)`, dispatching.

    CUDA tensors of float32/bf16/fp16 run the Triton kernel; everything else the reference.

    Args:
        x: input, any shape, floating.
        scale: :math:`\sigma > 0` (``max|x| / 127`` for absmax quantization).

    Returns:
        int8 tensor shaped like ``x``.

    Example:
        >>> int8_quantize(torch.tensor([0.5, 1.5, -0.26]), 0.5)
        tensor([ 1,  3, -1], dtype=torch.int8)
    """
    return int8_quantize_reference(x, scale)


@int8_quantize.register_kernel("cuda")
def _int8_cuda(x: Tensor, scale: float) -> Tensor:
    if not HAS_TRITON or x.dtype not in _TRITON_DTYPES:
        return int8_quantize_reference(x, scale)
    return int8_quantize_triton(x, scale)


@int8_quantize.register_fake
def _int8_fake(x: Tensor, scale: float) -> Tensor:
    return torch.empty_like(x, dtype=torch.int8)
