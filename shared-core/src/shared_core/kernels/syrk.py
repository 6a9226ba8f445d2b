r"""Symmetric rank-k update (SYRK): :math:`C = X X^\top`, computing only half of the blocks.

:math:`X X^\top` is symmetric, so its blocks above the diagonal are the transposes of those
below. The kernel launches one program per block pair :math:`(i, j)` with :math:`i \ge j` of
the lower triangle (``T (T + 1) / 2`` programs for ``T`` row blocks instead of ``T^2``),
computes that block with float32 accumulation, and writes it twice: at ``(i, j)`` and,
transposed, at ``(j, i)``. That halves the flops of a general ``X @ X.mT`` for the same output.
On diagonal blocks each element is written once (the lower half and its mirror), so the output
is exactly symmetric and every element is written exactly once.

The same kernel has a fused epilogue used by :mod:`shared_core.kernels.ns_step`:
:math:`\alpha\,X X^\top + \beta\,C` for a symmetric ``C`` of the output's shape (with
``C = X`` when ``X`` is square and symmetric, that is :math:`\beta A + \alpha A^2`).

Inputs are ``(..., m, k)`` in float32, bfloat16 or float16; leading dimensions are a batch
(the second grid axis). float32 inputs use IEEE float32 products (no TF32), matching torch's
default CUDA matmul precision.

- :func:`syrk_reference`: plain torch ``x @ x.mT``; the CPU implementation and test oracle.
- :func:`syrk_triton`: launches the Triton kernel (CUDA, or CPU under the interpreter).
- :func:`syrk`: the ``torch.library`` op ``shared_core::syrk``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._triton import (
    HAS_TRITON,
    autotune_configs,
    check_launchable,
    interpreting,
    require_triton,
    tl,
    triton,
)

__all__ = ["syrk", "syrk_reference", "syrk_triton"]

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def syrk_reference(x: Tensor) -> Tensor:
    r"""Plain-torch :math:`X X^\top` over the last two dimensions, in ``x``'s dtype.

    Args:
        x: ``(..., m, k)`` floating tensor.

    Returns:
        ``(..., m, m)`` tensor, same dtype.

    Example:
        >>> syrk_reference(torch.tensor([[1.0, 2.0], [0.0, 3.0]]))
        tensor([[5., 6.],
                [6., 9.]])
    """
    return x @ x.mT


def _check_input(x: Tensor, what: str, *, kernel: bool) -> None:
    if x.ndim < 2:
        raise ValueError(f"{what} needs a tensor of shape (..., m, k), got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{what} needs a floating-point tensor, got {x.dtype}")
    if kernel and x.dtype not in _DTYPES:
        raise ValueError(f"{what} supports float32, bfloat16 and float16, got {x.dtype}")


def kernel_supports(x: Tensor) -> bool:
    """Whether the Triton kernel takes ``x``'s dtype (other dtypes run the reference)."""
    return x.dtype in _DTYPES


if HAS_TRITON:

    @triton.autotune(
        # The first config is the interpreter's: small square tiles, so CPU tests on small odd
        # shapes still cross block boundaries and exercise the mirrored off-diagonal stores.
        configs=autotune_configs(
            [
                triton.Config({"BLOCK": 32, "BLOCK_K": 32}, num_warps=4, num_stages=3),
                triton.Config({"BLOCK": 128, "BLOCK_K": 64}, num_warps=8, num_stages=3),
                triton.Config({"BLOCK": 128, "BLOCK_K": 64}, num_warps=4, num_stages=4),
                triton.Config({"BLOCK": 128, "BLOCK_K": 32}, num_warps=4, num_stages=4),
                triton.Config({"BLOCK": 64, "BLOCK_K": 64}, num_warps=4, num_stages=4),
                triton.Config({"BLOCK": 128, "BLOCK_K": 128}, num_warps=8, num_stages=2),
                triton.Config({"BLOCK": 256, "BLOCK_K": 64}, num_warps=8, num_stages=3),
            ]
        ),
        key=["M", "K", "HAS_C"],
    )
    @triton.jit
    def _syrk_kernel(
        x_ptr,
        c_ptr,
        out_ptr,
        M,
        K,
        sxb,
        sxm,
        sxk,
        scb,
        scm,
        scn,
        sob,
        som,
        son,
        alpha,
        beta,
        HAS_C: tl.constexpr,
        PRECISION: tl.constexpr,
        UPCAST: tl.constexpr,
        BLOCK: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        pid = tl.program_id(0)
        batch = tl.program_id(1).to(tl.int64)
        # Row-major enumeration of the lower triangle: pid = bi (bi + 1) / 2 + bj, bj <= bi.
        # The float square root can be one off near perfect squares; the two guards fix that.
        bi = ((tl.sqrt(8.0 * pid + 1.0) - 1.0) * 0.5).to(tl.int32)
        bi = tl.where(bi * (bi + 1) // 2 > pid, bi - 1, bi)
        bi = tl.where((bi + 1) * (bi + 2) // 2 <= pid, bi + 1, bi)
        bj = pid - bi * (bi + 1) // 2

        rows = bi * BLOCK + tl.arange(0, BLOCK)
        cols = bj * BLOCK + tl.arange(0, BLOCK)
        ks = tl.arange(0, BLOCK_K)
        rows64 = rows.to(tl.int64)
        cols64 = cols.to(tl.int64)
        x_base = x_ptr + batch * sxb
        a_ptrs = x_base + rows64[:, None] * sxm + ks[None, :] * sxk
        b_ptrs = x_base + cols64[:, None] * sxm + ks[None, :] * sxk
        row_ok = rows[:, None] < M
        col_ok = cols[:, None] < M

        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
        for kb in range(0, tl.cdiv(K, BLOCK_K)):
            k_ok = ks[None, :] < K - kb * BLOCK_K
            a = tl.load(a_ptrs, mask=row_ok & k_ok, other=0.0)
            b = tl.load(b_ptrs, mask=col_ok & k_ok, other=0.0)
            if UPCAST:
                # The interpreter multiplies bfloat16 tiles as their raw uint16 bit patterns;
                # float32 products of bfloat16 values are exact, so the result is unchanged.
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, tl.trans(b), acc, input_precision=PRECISION)
            a_ptrs += BLOCK_K * sxk
            b_ptrs += BLOCK_K * sxk

        if HAS_C:
            c_base = c_ptr + batch * scb
            c_mask = (rows[:, None] < M) & (cols[None, :] < M)
            c_ptrs = c_base + rows64[:, None] * scm + cols64[None, :] * scn
            cval = tl.load(c_ptrs, mask=c_mask, other=0.0).to(tl.float32)
            acc = alpha * acc + beta * cval
        else:
            acc = alpha * acc
        res = acc.to(out_ptr.dtype.element_ty)

        o_base = out_ptr + batch * sob
        # Off the diagonal (bi > bj) every row index exceeds every column index, so the
        # triangle tests below only bite on diagonal blocks, where they make each element
        # written exactly once.
        lower = (rows[:, None] < M) & (cols[None, :] < M) & (rows[:, None] >= cols[None, :])
        tl.store(o_base + rows64[:, None] * som + cols64[None, :] * son, res, mask=lower)
        # The mirror at (cols, rows), stored as the transposed tile so that the store stays
        # contiguous along the output's rows.
        upper = (cols[:, None] < M) & (rows[None, :] < M) & (rows[None, :] > cols[:, None])
        tl.store(o_base + cols64[:, None] * som + rows64[None, :] * son, tl.trans(res), mask=upper)


def syrk_triton(
    x: Tensor,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    c: Tensor | None = None,
    out: Tensor | None = None,
) -> Tensor:
    r"""Launch the Triton SYRK kernel: :math:`\alpha X X^\top + \beta C` over the last two dims.

    Args:
        x: ``(..., m, k)`` tensor (float32, bfloat16 or float16) on CUDA, or on the CPU under
            ``TRITON_INTERPRET=1``; any strides.
        alpha: scale of the product.
        beta: scale of ``c``.
        c: optional symmetric ``(..., m, m)`` tensor of ``x``'s dtype for the fused epilogue
            (its upper triangle is read as the mirror of its lower one).
        out: optional contiguous ``(..., m, m)`` output of ``x``'s dtype; every element is
            overwritten. A new tensor is allocated when ``None``.

    Returns:
        ``(..., m, m)`` tensor in ``x``'s dtype (float32 accumulation), exactly symmetric.
    """
    require_triton("syrk_triton")
    _check_input(x, "syrk_triton", kernel=True)
    check_launchable(x)
    *batch, m, k = x.shape
    x3 = x.reshape(-1, m, k)
    nb = x3.shape[0]
    if out is None:
        out3 = torch.empty((nb, m, m), dtype=x.dtype, device=x.device)
    else:
        if out.shape != (*batch, m, m) or out.dtype != x.dtype or not out.is_contiguous():
            raise ValueError(
                f"out must be a contiguous {(*batch, m, m)} tensor of {x.dtype}, "
                f"got {tuple(out.shape)} of {out.dtype}"
            )
        out3 = out.view(nb, m, m)
    if c is not None:
        if c.shape[-2:] != (m, m) or c.dtype != x.dtype:
            raise ValueError(
                f"c must be ({m}, {m}) of dtype {x.dtype}, got {tuple(c.shape)} of {c.dtype}"
            )
        c3 = c.reshape(-1, m, m)
        if c3.shape[0] != nb:
            raise ValueError(f"c has batch {c3.shape[0]}, expected {nb}")
    else:
        c3 = out3  # never read: HAS_C is False
    if nb and m:
        precision = "ieee" if x.dtype == torch.float32 else "tf32"

        def grid(meta):
            t = triton.cdiv(m, meta["BLOCK"])
            return (t * (t + 1) // 2, nb)

        _syrk_kernel[grid](
            x3,
            c3,
            out3,
            m,
            k,
            x3.stride(0),
            x3.stride(1),
            x3.stride(2),
            c3.stride(0),
            c3.stride(1),
            c3.stride(2),
            out3.stride(0),
            out3.stride(1),
            out3.stride(2),
            float(alpha),
            float(beta),
            HAS_C=c is not None,
            PRECISION=precision,
            UPCAST=interpreting() and x.dtype == torch.bfloat16,
        )
    return out3.view(*batch, m, m)


@torch.library.custom_op("shared_core::syrk", mutates_args=())
def syrk(x: Tensor) -> Tensor:
    r""":math:`X X^\top` (symmetric rank-k update) as a dispatching op.

    CUDA tensors of float32, bfloat16 or float16 run the Triton kernel, which computes only
    the lower-triangle blocks and mirrors them; everything else (other devices, float64) runs
    :func:`syrk_reference`.

    Args:
        x: ``(..., m, k)`` floating tensor.

    Returns:
        ``(..., m, m)`` tensor in ``x``'s dtype.

    Example:
        >>> import shared_core.kernels as K
        >>> K.syrk(torch.tensor([[1.0, 2.0], [0.0, 3.0]]))
        tensor([[5., 6.],
                [6., 9.]])
    """
    _check_input(x, "syrk", kernel=False)
    return syrk_reference(x)


@syrk.register_kernel("cuda")
def _syrk_cuda(x: Tensor) -> Tensor:
    if not HAS_TRITON or not kernel_supports(x):  # float64, or no Triton: the reference
        return syrk_reference(x)
    return syrk_triton(x)


@syrk.register_fake
def _syrk_fake(x: Tensor) -> Tensor:
    _check_input(x, "syrk", kernel=False)
    return x.new_empty((*x.shape[:-1], x.shape[-2]))
