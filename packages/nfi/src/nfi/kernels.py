r"""The zero-sum CE backward as one Triton kernel, beside its plain-torch reference.

Given the saved log-probabilities :math:`\log p` of a row, its target :math:`y` and its weight
:math:`w` (0 for ignored rows), the gradient is

.. math::

    g_j = w\,e^{\log p_j}\ (j \ne y), \qquad
    g_y = \begin{cases} -\sum_{j\ne y} g_j & \log p_y > -\log 2 \\
                        w\,e^{\log p_y} - w & \text{otherwise} \end{cases}

(:mod:`nfi.loss`, mode ``"confident"``). Torch needs a pass for the softmax backward and one
more for the row sum; the kernel reads each row twice (the sum of the others, then the writes)
and writes it once, accumulating in float32.

Shared-core's pattern:

- :func:`ce_grad_reference`: plain torch (the CPU path and the oracle); the sum in float64.
  (The autograd function's torch path takes torch's own row sum instead, for speed.)
- :func:`ce_grad_triton`: the Triton launcher (CUDA tensors, or CPU ones under
  ``TRITON_INTERPRET=1``); one program per row, the row in blocks of ``BLOCK`` classes.
- :func:`ce_grad`: the op ``nfi::stable_ce_grad`` dispatching by device.
- :data:`KERNELS`: the :class:`shared_core.kernels.KernelSpec` for the GPU check.

The kernel's sum is in float32 (the reference's in float64): for float32 logits the two can
differ by about :math:`C u_{32}` relative in the target entry, both far inside what torch's
own target entry gets wrong when :math:`p_y \to 1`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from shared_core.kernels import (
    HAS_TRITON,
    KernelSpec,
    autotune_configs,
    check_launchable,
    require_triton,
)
from shared_core.kernels._triton import tl, triton

__all__ = ["KERNELS", "ce_grad", "ce_grad_reference", "ce_grad_triton"]

_LOG_HALF = -math.log(2.0)
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check(logp: Tensor, target: Tensor, w: Tensor) -> None:
    if not logp.is_floating_point() or logp.dim() != 2:
        raise ValueError(
            f"logp must be a floating (N, C) tensor, got {logp.dtype} {tuple(logp.shape)}"
        )
    N, C = logp.shape
    if target.shape != (N,) or w.shape != (N,):
        raise ValueError(
            f"target and w must have shape ({N},), got {tuple(target.shape)}, {tuple(w.shape)}"
        )
    if N and (int(target.min()) < 0 or int(target.max()) >= C):
        raise ValueError(f"target out of range [0, {C}) (use w = 0 for ignored rows)")


def ce_grad_reference(logp: Tensor, target: Tensor, w: Tensor) -> Tensor:
    """Plain-torch zero-sum CE gradient from log-probabilities, targets and row weights.

    Args:
        logp: ``(N, C)`` log-softmax of the logits.
        target: ``(N,)`` int64 class indices in ``[0, C)``.
        w: ``(N,)`` row weights in ``logp``'s dtype (``1/N`` for a mean, 0 for ignored rows).

    Returns:
        ``(N, C)`` gradient in ``logp``'s dtype.

    Example:
        >>> lp = torch.log_softmax(torch.tensor([[20.0, 0.0, 0.0]]), 1)
        >>> g = ce_grad_reference(lp, torch.tensor([0]), torch.tensor([1.0]))
        >>> bool(g.sum() == 0) and bool(g[0, 0] < 0)
        True
    """
    _check(logp, target, w)
    t = target.long()[:, None]
    g = torch.exp(logp) * w[:, None]
    gy = g.gather(1, t).squeeze(1) - w
    others = g.scatter(1, t, 0.0)
    comp = others.sum(dim=1, dtype=torch.float64).to(g.dtype)
    confident = logp.gather(1, t).squeeze(1) > _LOG_HALF
    return others.scatter_(1, t, torch.where(confident, -comp, gy)[:, None])


if HAS_TRITON:

    @triton.autotune(
        configs=autotune_configs(
            [
                triton.Config({"BLOCK": 1024}, num_warps=4),
                triton.Config({"BLOCK": 2048}, num_warps=8),
                triton.Config({"BLOCK": 4096}, num_warps=8),
            ]
        ),
        key=["C"],
    )
    @triton.jit
    def _ce_grad_kernel(lp_ptr, t_ptr, w_ptr, out_ptr, C, log_half, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        base = row * C
        t = tl.load(t_ptr + row)
        w = tl.load(w_ptr + row).to(tl.float32)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, C, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = (offs < C) & (offs != t)
            lp = tl.load(lp_ptr + base + offs, mask=mask, other=-float("inf")).to(tl.float32)
            g = tl.exp(lp) * w
            # round each entry to the output dtype first, so the sum is of the stored entries
            g = g.to(out_ptr.dtype.element_ty).to(tl.float32)
            acc += tl.where(mask, g, 0.0)
            tl.store(out_ptr + base + offs, g.to(out_ptr.dtype.element_ty), mask=mask)
        comp = tl.sum(acc, axis=0)
        lpy = tl.load(lp_ptr + base + t).to(tl.float32)
        py_w = (tl.exp(lpy) * w).to(out_ptr.dtype.element_ty).to(tl.float32)
        gy = tl.where(lpy > log_half, -comp, py_w - w)
        tl.store(out_ptr + base + t, gy.to(out_ptr.dtype.element_ty))


def ce_grad_triton(logp: Tensor, target: Tensor, w: Tensor) -> Tensor:
    """Launch the Triton kernel (float32/bf16/fp16; see :func:`ce_grad_reference`)."""
    require_triton("ce_grad_triton")
    _check(logp, target, w)
    return launch_ce_grad(logp, target, w)


def launch_ce_grad(logp: Tensor, target: Tensor, w: Tensor) -> Tensor:
    """:func:`ce_grad_triton` without the target range check (whose ``min``/``max`` are host
    syncs): for callers that have checked the targets already, as :mod:`nfi.loss` does."""
    require_triton("launch_ce_grad")
    check_launchable(logp, target, w)
    if logp.dtype not in _TRITON_DTYPES:
        raise ValueError(f"ce_grad_triton takes {_TRITON_DTYPES}, got {logp.dtype}")
    lp = logp.contiguous()
    out = torch.empty_like(lp)
    N, C = lp.shape
    if N:
        _ce_grad_kernel[(N,)](lp, target.long().contiguous(), w.contiguous(), out, C, _LOG_HALF)
    return out


@torch.library.custom_op("nfi::stable_ce_grad", mutates_args=())
def ce_grad(logp: Tensor, target: Tensor, w: Tensor) -> Tensor:
    """The zero-sum CE gradient as a dispatching op (CUDA: Triton; elsewhere the reference)."""
    return ce_grad_reference(logp, target, w)


@ce_grad.register_kernel("cuda")
def _ce_grad_cuda(logp: Tensor, target: Tensor, w: Tensor) -> Tensor:
    if not HAS_TRITON or logp.dtype not in _TRITON_DTYPES:
        return ce_grad_reference(logp, target, w)
    return ce_grad_triton(logp, target, w)


@ce_grad.register_fake
def _ce_grad_fake(logp: Tensor, target: Tensor, w: Tensor) -> Tensor:
    return torch.empty_like(logp)


def _example(device, dtype, gen):
    # 37 rows x 1031 classes (no multiple of any block), gaps from uncertain to absorbed
    N, C = 37, 1031
    z = torch.randn(N, C, generator=gen, dtype=torch.float64)
    t = torch.randint(0, C, (N,), generator=gen)
    z[torch.arange(N), t] += torch.linspace(-1, 30, N, dtype=torch.float64)
    logp = torch.log_softmax(z.to(dtype), dim=1)
    w = torch.full((N,), 1.0 / N, dtype=dtype)
    return (logp.to(device), t.to(device), w.to(device))


#: name -> spec, for the GPU check (``frontier_opt.kernels`` entry point).
KERNELS: dict[str, KernelSpec] = {
    "stable_ce_grad": KernelSpec(ce_grad, ce_grad_reference, ce_grad_triton, _example),
}
