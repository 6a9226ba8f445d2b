r"""Fused l-inf LMO: :math:`\mathrm{lmo}_\infty(g, r) = -r\,\mathrm{sign}(g)`.

The minimiser of :math:`\langle g, d\rangle` over :math:`\|d\|_\infty \le r` takes each
coordinate to the end of its interval opposite the gradient's sign. It is the update of
signSGD/Lion-style methods and the l-inf case of :mod:`shared_core.lmo`. One elementwise pass:
read ``g`` once, write the output once (the unfused torch expression makes a temporary for
``sign(g)`` and a second pass for the scale).

Zeros map to zero and NaN stays NaN. (``torch.sign`` maps NaN to 0, which would turn a NaN
gradient silently into a zero step; the reference guards against that explicitly.)

Three functions of the same math sit side by side:

- :func:`sign_lmo_reference`: plain torch; the CPU implementation and the test oracle.
- :func:`sign_lmo_triton`: launches the Triton kernel (CUDA, or CPU under the interpreter).
- :func:`sign_lmo`: the ``torch.library`` op ``shared_core::sign_lmo`` that dispatches between
  them by device and works under ``torch.compile``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._numeric import sign_keep_nan
from ._triton import HAS_TRITON, autotune_configs, check_launchable, require_triton, tl, triton

__all__ = ["sign_lmo", "sign_lmo_reference", "sign_lmo_triton"]


def sign_lmo_reference(g: Tensor, radius: float) -> Tensor:
    """Plain-torch ``-radius * sign(g)`` in ``g``'s dtype.

    Example:
        >>> sign_lmo_reference(torch.tensor([2.0, -0.5, 0.0]), 0.1)
        tensor([-0.1000,  0.1000, -0.0000])
    """
    return sign_keep_nan(g).mul_(-radius)


if HAS_TRITON:

    @triton.autotune(
        configs=autotune_configs(
            [
                triton.Config({"BLOCK": 1024}, num_warps=4),
                triton.Config({"BLOCK": 2048}, num_warps=8),
                triton.Config({"BLOCK": 4096}, num_warps=8),
            ]
        ),
        key=["n"],
    )
    @triton.jit
    def _sign_lmo_kernel(g_ptr, out_ptr, n, neg_radius, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        # g * 0 keeps NaN as NaN and zero as zero.
        s = tl.where(g > 0, 1.0, tl.where(g < 0, -1.0, g * 0.0))
        tl.store(out_ptr + offs, (s * neg_radius).to(out_ptr.dtype.element_ty), mask=mask)


def sign_lmo_triton(g: Tensor, radius: float) -> Tensor:
    """Launch the Triton kernel for ``-radius * sign(g)`` (any shape; computed in float32)."""
    require_triton("sign_lmo_triton")
    check_launchable(g)
    g_flat = g.contiguous().view(-1)
    out = torch.empty_like(g_flat)
    n = g_flat.numel()
    if n:

        def grid(meta):
            return (triton.cdiv(n, meta["BLOCK"]),)

        _sign_lmo_kernel[grid](g_flat, out, n, -float(radius))
    return out.view(g.shape)


@torch.library.custom_op("shared_core::sign_lmo", mutates_args=())
def sign_lmo(g: Tensor, radius: float) -> Tensor:
    r"""The l-inf LMO :math:`-r\,\mathrm{sign}(g)` as a dispatching op.

    CUDA tensors run the Triton kernel; every other device runs :func:`sign_lmo_reference`.

    Args:
        g: the gradient, any shape, floating dtype.
        radius: the radius :math:`r \ge 0` of the l-inf ball.

    Returns:
        A new tensor shaped and typed like ``g``.

    Example:
        >>> import shared_core.kernels as K
        >>> K.sign_lmo(torch.tensor([3.0, -1.0]), 2.0)
        tensor([-2.,  2.])
    """
    return sign_lmo_reference(g, radius)


@sign_lmo.register_kernel("cuda")
def _sign_lmo_cuda(g: Tensor, radius: float) -> Tensor:
    if not HAS_TRITON:  # pragma: no cover - CUDA machines without Triton are rare
        return sign_lmo_reference(g, radius)
    return sign_lmo_triton(g, radius)


@sign_lmo.register_fake
def _sign_lmo_fake(g: Tensor, radius: float) -> Tensor:
    return torch.empty_like(g)
