r"""Fused stochastic rounding to levels: the elementwise heart of QSGD.

.. math::
    r_i = |x_i|\,\mu, \qquad
    \ell_i = \mathrm{sign}(x_i)\,
        \min\!\big(L,\ \lfloor r_i\rfloor + [u_i < r_i - \lfloor r_i\rfloor]\big),

with :math:`\mu = s/\|x\|` and :math:`L = s` for QSGD, and :math:`u_i \sim U[0,1)` supplied by
the caller (so CPU and GPU draw the same randomness and a run stays reproducible). Since
:math:`\Pr[\ell_i = \lceil r_i\rceil] = r_i - \lfloor r_i\rfloor`, :math:`\mathbb{E}\,\ell_i / \mu
= x_i`. The torch expression makes five temporaries of size d; the kernel reads ``x`` and ``u``
once and writes the levels once.

- :func:`stochastic_quantize_reference`: plain torch in the input's dtype (CPU path, oracle);
- :func:`stochastic_quantize_triton`: the Triton launcher (float32/bf16/fp16 inputs);
- :func:`stochastic_quantize`: the op ``diloco_ef::stochastic_quantize``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from shared_core.kernels import HAS_TRITON, autotune_configs, check_launchable, require_triton

if HAS_TRITON:
    import triton
    import triton.language as tl

__all__ = ["stochastic_quantize", "stochastic_quantize_reference", "stochastic_quantize_triton"]

_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check(x: Tensor, u: Tensor, levels: int) -> None:
    if x.shape != u.shape:
        raise ValueError(f"x and u must have one shape, got {tuple(x.shape)} and {tuple(u.shape)}")
    if levels < 1:
        raise ValueError(f"levels must be >= 1, got {levels}")


def stochastic_quantize_reference(x: Tensor, u: Tensor, mult: float, levels: int) -> Tensor:
    """Signed levels in ``x``'s dtype (float32 arithmetic for float32 inputs).

    Example:
        >>> stochastic_quantize_reference(torch.tensor([0.25, -1.0]), torch.tensor([0.9, 0.1]),
        ...                               2.0, 3)
        tensor([ 0., -2.])
    """
    _check(x, u, levels)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    xw = x.to(work)
    r = xw.abs() * torch.tensor(mult, dtype=work)
    low = torch.floor(r)
    up = (u.to(work) < (r - low)).to(work)
    lvl = torch.clamp(low + up, max=float(levels))
    return (torch.sign(xw) * lvl).to(x.dtype)


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
    def _sq_kernel(x_ptr, u_ptr, out_ptr, n, mult, levels, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(u_ptr + offs, mask=mask, other=1.0).to(tl.float32)
        r = tl.abs(x) * mult
        low = tl.floor(r)
        lvl = tl.minimum(low + tl.where(u < r - low, 1.0, 0.0), levels)
        s = tl.where(x > 0, 1.0, tl.where(x < 0, -1.0, 0.0))
        tl.store(out_ptr + offs, (s * lvl).to(out_ptr.dtype.element_ty), mask=mask)


def stochastic_quantize_triton(x: Tensor, u: Tensor, mult: float, levels: int) -> Tensor:
    """Launch the Triton kernel (float32 arithmetic; float32/bf16/fp16 inputs)."""
    require_triton("stochastic_quantize_triton")
    check_launchable(x, u)
    _check(x, u, levels)
    if x.dtype not in _TRITON_DTYPES:
        raise ValueError(f"stochastic_quantize_triton takes {_TRITON_DTYPES}, got {x.dtype}")
    xf, uf = x.contiguous().view(-1), u.contiguous().view(-1)
    out = torch.empty_like(xf)
    n = xf.numel()
    if n:
        mult32 = float(torch.tensor(mult, dtype=torch.float32))

        def grid(meta):
            return (triton.cdiv(n, meta["BLOCK"]),)

        _sq_kernel[grid](xf, uf, out, n, mult32, float(levels))
    return out.view(x.shape)


@torch.library.custom_op("diloco_ef::stochastic_quantize", mutates_args=())
def stochastic_quantize(x: Tensor, u: Tensor, mult: float, levels: int) -> Tensor:
    r"""Stochastic rounding of :math:`|x|\mu` to signed levels in :math:`[-L, L]`, dispatching.

    CUDA tensors of float32/bf16/fp16 run the Triton kernel; everything else the reference.

    Args:
        x: input, any shape, floating.
        u: uniforms in [0, 1), shaped like ``x``.
        mult: the multiplier :math:`\mu \ge 0` (``levels / ||x||`` for QSGD).
        levels: the largest level :math:`L \ge 1`.

    Returns:
        Signed levels (integers stored in ``x``'s dtype), shaped like ``x``.

    Example:
        >>> stochastic_quantize(torch.tensor([0.5, -0.5]), torch.tensor([0.4, 0.6]), 1.0, 1)
        tensor([ 1., -0.])
    """
    return stochastic_quantize_reference(x, u, mult, levels)


@stochastic_quantize.register_kernel("cuda")
def _sq_cuda(x: Tensor, u: Tensor, mult: float, levels: int) -> Tensor:
    if not HAS_TRITON or x.dtype not in _TRITON_DTYPES:
        return stochastic_quantize_reference(x, u, mult, levels)
    return stochastic_quantize_triton(x, u, mult, levels)


@stochastic_quantize.register_fake
def _sq_fake(x: Tensor, u: Tensor, mult: float, levels: int) -> Tensor:
    return torch.empty_like(x)
