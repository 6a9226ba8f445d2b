r"""Threshold selection for approximate Top-k: the indices of :math:`|x_i| \ge t`, in order.

Given the sampled threshold :math:`t` of :class:`~diloco_ef.compressors.ApproxTopK`, the
candidates are :math:`\{i : |x_i| \ge t\}`. The kernel compacts them without atomics, so the
output is deterministic and ascending (equal to ``torch.nonzero``):

1. each block of ``BLOCK`` entries counts its survivors :math:`c_b`;
2. an exclusive prefix sum gives each block its output offset :math:`o_b = \sum_{b'<b} c_{b'}`;
3. each block writes index :math:`i` to :math:`o_b + (\text{number of survivors before } i
   \text{ in the block})`, a within-block ``cumsum``.

Torch materialises the boolean mask and ``nonzero`` synchronises; here one pass reads ``x`` for
the counts and one more writes only the :math:`\approx(1+\text{slack})k` survivors.

- :func:`threshold_select_reference`: plain torch (CPU path, oracle);
- :func:`threshold_select_triton`: the Triton launcher;
- :func:`threshold_select`: the op ``diloco_ef::threshold_select``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from shared_core.kernels import HAS_TRITON, check_launchable, require_triton

if HAS_TRITON:
    import triton
    import triton.language as tl

__all__ = ["threshold_select", "threshold_select_reference", "threshold_select_triton"]

_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_BLOCK = 1024


def threshold_select_reference(x: Tensor, threshold: float) -> Tensor:
    """Ascending int64 indices (into ``x`` flattened) of the entries with ``|x| >= threshold``.

    Example:
        >>> threshold_select_reference(torch.tensor([0.5, -2.0, 1.0, 3.0]), 1.0)
        tensor([1, 2, 3])
    """
    if not x.is_floating_point():
        raise ValueError(f"threshold_select takes floating tensors, got {x.dtype}")
    return torch.nonzero(x.reshape(-1).abs() >= threshold).reshape(-1)


if HAS_TRITON:

    @triton.jit
    def _count_kernel(x_ptr, counts_ptr, n, t, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        a = tl.abs(tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32))
        keep = (a >= t) & mask
        tl.store(counts_ptr + pid, tl.sum(keep.to(tl.int32), axis=0))

    @triton.jit
    def _gather_kernel(x_ptr, starts_ptr, out_ptr, n, t, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        a = tl.abs(tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32))
        keep = ((a >= t) & mask).to(tl.int32)
        pos = tl.load(starts_ptr + pid) + tl.cumsum(keep, axis=0) - 1
        tl.store(out_ptr + pos, offs, mask=keep == 1)


def threshold_select_triton(x: Tensor, threshold: float) -> Tensor:
    """Launch the count and gather kernels (float32 comparisons; float32/bf16/fp16 inputs).

    The threshold is compared in float32, so it must be representable there for the result
    to equal the reference exactly (any magnitude read from ``x`` is).
    """
    require_triton("threshold_select_triton")
    check_launchable(x)
    if x.dtype not in _TRITON_DTYPES:
        raise ValueError(f"threshold_select_triton takes {_TRITON_DTYPES}, got {x.dtype}")
    xf = x.contiguous().view(-1)
    n = xf.numel()
    if n == 0:
        return torch.empty(0, dtype=torch.int64, device=x.device)
    blocks = triton.cdiv(n, _BLOCK)
    t32 = float(torch.tensor(threshold, dtype=torch.float32))
    counts = torch.empty(blocks, dtype=torch.int32, device=x.device)
    _count_kernel[(blocks,)](xf, counts, n, t32, BLOCK=_BLOCK)
    ends = torch.cumsum(counts, 0, dtype=torch.int64)
    total = int(ends[-1])  # the one host synchronisation: the output size
    out = torch.empty(total, dtype=torch.int64, device=x.device)
    if total:
        starts = ends - counts
        _gather_kernel[(blocks,)](xf, starts, out, n, t32, BLOCK=_BLOCK)
    return out


@torch.library.custom_op("diloco_ef::threshold_select", mutates_args=())
def threshold_select(x: Tensor, threshold: float) -> Tensor:
    r"""Ascending indices of :math:`|x_i| \ge t` in ``x`` flattened, dispatching.

    CUDA tensors of float32/bf16/fp16 run the Triton kernels; everything else the reference.

    Args:
        x: input, any shape, floating.
        threshold: :math:`t`.

    Returns:
        A 1-D int64 tensor (data-dependent length).

    Example:
        >>> threshold_select(torch.tensor([[0.1, -4.0], [2.0, 0.0]]), 2.0)
        tensor([1, 2])
    """
    return threshold_select_reference(x, threshold)


@threshold_select.register_kernel("cuda")
def _ts_cuda(x: Tensor, threshold: float) -> Tensor:
    if not HAS_TRITON or x.dtype not in _TRITON_DTYPES:
        return threshold_select_reference(x, threshold)
    return threshold_select_triton(x, threshold)


@threshold_select.register_fake
def _ts_fake(x: Tensor, threshold: float) -> Tensor:
    n = torch.library.get_ctx().new_dynamic_size()
    return x.new_empty(n, dtype=torch.int64)
