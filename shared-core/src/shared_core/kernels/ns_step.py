r"""One Newton-Schulz step on symmetric products: :math:`X \leftarrow aX + (bA + cA^2)X`.

With :math:`A = X X^\top` this applies the odd quintic :math:`p(s) = as + bs^3 + cs^5` to every
singular value of ``X`` (the iteration behind Muon and :func:`shared_core.polar.msign`).

Cost per step for ``X`` of shape ``(m, k)``, ``m <= k``, counting multiply-adds:

=====================  ======================  =============================
product                general matmul          here
=====================  ======================  =============================
:math:`A = XX^\top`    :math:`m^2 k`           :math:`m^2 k / 2` (SYRK)
:math:`A^2 = AA^\top`  :math:`m^3`             :math:`m^3 / 2` (SYRK, A symmetric)
:math:`BX`             :math:`m^2 k`           :math:`m^2 k` (cuBLAS GEMM)
=====================  ======================  =============================

so a square step does :math:`2m^3` instead of :math:`3m^3`: up to 1.5x fewer flops. The two
symmetric products run the Triton kernel of :mod:`shared_core.kernels.syrk`; the second one
fuses :math:`B = cA^2 + bA` into its epilogue, so ``A^2`` is never stored. The last product
:math:`aX + BX` is a dense GEMM with nothing to save, so it goes to cuBLAS (``addmm``), which a
hand-written Triton GEMM could at best match.

- :func:`ns_step_reference`: plain torch, shaped exactly like ``torch.optim.Muon``'s loop
  (``addmm`` twice), so the CPU path costs the same as Muon's.
- :func:`ns_step_triton`: the SYRK kernels plus the GEMM (CUDA, or CPU under the interpreter).
- :func:`ns_step`: the ``torch.library`` op ``shared_core::ns_step``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._triton import HAS_TRITON, check_launchable, require_triton
from .syrk import _check_input, kernel_supports, syrk_triton

__all__ = ["ns_step", "ns_step_reference", "ns_step_triton"]


def _apply(x: Tensor, B: Tensor, a: float) -> Tensor:
    # a*X + B@X; addmm/baddbmm fuse the scaling into the GEMM epilogue.
    if x.ndim == 2:
        return torch.addmm(x, B, x, beta=a)
    *batch, m, k = x.shape
    x3 = x.reshape(-1, m, k)
    return torch.baddbmm(x3, B.reshape(-1, m, m), x3, beta=a).view(*batch, m, k)


def ns_step_reference(x: Tensor, a: float, b: float, c: float) -> Tensor:
    r"""Plain-torch Newton-Schulz step :math:`aX + (bA + cA^2)X`, :math:`A = XX^\top`.

    Args:
        x: ``(..., m, k)`` floating tensor (fastest with ``m <= k``).
        a, b, c: the quintic's coefficients.

    Returns:
        A tensor shaped and typed like ``x``.

    Example:
        >>> x = torch.tensor([[0.5, 0.0], [0.0, 0.25]])
        >>> ns_step_reference(x, 1.5, -0.5, 0.0)  # cubic Newton-Schulz: 1.5 s - 0.5 s^3
        tensor([[0.6875, 0.0000],
                [0.0000, 0.3672]])
    """
    if x.ndim == 2:
        A = x @ x.T
        B = torch.addmm(A, A, A, beta=b, alpha=c)
        return torch.addmm(x, B, x, beta=a)
    *batch, m, k = x.shape
    x3 = x.reshape(-1, m, k)
    A = torch.bmm(x3, x3.mT)
    B = torch.baddbmm(A, A, A, beta=b, alpha=c)
    return torch.baddbmm(x3, B, x3, beta=a).view(*batch, m, k)


def ns_step_triton(x: Tensor, a: float, b: float, c: float) -> Tensor:
    r"""Newton-Schulz step with both symmetric products on the Triton SYRK kernel.

    Args:
        x: ``(..., m, k)`` tensor (float32, bfloat16 or float16) on CUDA, or on the CPU under
            ``TRITON_INTERPRET=1``.
        a, b, c: the quintic's coefficients.

    Returns:
        A tensor shaped and typed like ``x`` (float32 accumulation inside every product).
    """
    require_triton("ns_step_triton")
    _check_input(x, "ns_step_triton", kernel=True)
    check_launchable(x)
    A = syrk_triton(x)
    # A is symmetric, so A @ A = A @ A^T: a second SYRK, with B = c A^2 + b A fused.
    B = syrk_triton(A, alpha=c, beta=b, c=A)
    return _apply(x, B, a)


@torch.library.custom_op("shared_core::ns_step", mutates_args=())
def ns_step(x: Tensor, a: float, b: float, c: float) -> Tensor:
    r"""One Newton-Schulz step :math:`aX + (bA + cA^2)X`, :math:`A = XX^\top`, as an op.

    CUDA tensors of float32, bfloat16 or float16 run :func:`ns_step_triton` (SYRK kernels);
    everything else (other devices, float64) runs :func:`ns_step_reference`.

    Args:
        x: ``(..., m, k)`` floating tensor.
        a, b, c: the quintic's coefficients.

    Returns:
        A tensor shaped and typed like ``x``.

    Example:
        >>> import shared_core.kernels as K
        >>> K.ns_step(torch.tensor([[0.5, 0.0], [0.0, 0.25]]), 1.5, -0.5, 0.0)
        tensor([[0.6875, 0.0000],
                [0.0000, 0.3672]])
    """
    _check_input(x, "ns_step", kernel=False)
    return ns_step_reference(x, a, b, c)


@ns_step.register_kernel("cuda")
def _ns_step_cuda(x: Tensor, a: float, b: float, c: float) -> Tensor:
    if not HAS_TRITON or not kernel_supports(x):  # float64, or no Triton: the reference
        return ns_step_reference(x, a, b, c)
    return ns_step_triton(x, a, b, c)


@ns_step.register_fake
def _ns_step_fake(x: Tensor, a: float, b: float, c: float) -> Tensor:
    _check_input(x, "ns_step", kernel=False)
    return torch.empty_like(x)
