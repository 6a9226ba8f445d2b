"""Triton kernels of diloco-ef, each beside its plain-torch reference (shared-core's pattern).

:data:`KERNELS` is registered under the ``frontier_opt.kernels`` entry point, so that
``tools/gpu_check.py`` compiles and checks every kernel here against its reference.
"""

from __future__ import annotations

import torch

from shared_core.kernels import KernelSpec

from .int8 import int8_quantize, int8_quantize_reference, int8_quantize_triton
from .quantize import stochastic_quantize, stochastic_quantize_reference, stochastic_quantize_triton
from .threshold import threshold_select, threshold_select_reference, threshold_select_triton


def _quantize_example(device, dtype, gen):
    # An odd length (a masked tail for every block size) and a multiplier that makes most
    # entries round between two of the 7 levels.
    x = torch.randn(3, 1001, generator=gen)
    u = torch.rand(3, 1001, generator=gen)
    mult = 7.0 / float(x.abs().max())
    return (x.to(device=device, dtype=dtype), u.to(device=device, dtype=dtype), mult, 7)


def _int8_example(device, dtype, gen):
    # An odd length, no zeros, and a scale at which most entries land strictly between levels.
    x = torch.randn(5, 613, generator=gen)
    x = torch.where(x.abs() < 1e-3, torch.full_like(x, 0.5), x).to(dtype)
    # A float32-exact scale: the kernel divides in float32, the check in float64.
    scale = float(torch.tensor(float(x.abs().max()) / 127.0, dtype=torch.float32))
    return (x.to(device=device), scale)


def _threshold_example(device, dtype, gen):
    # 3 x 2999 entries (no multiple of the block) and a threshold read from the data itself,
    # so it is exact in every dtype; about 3% of the entries survive.
    x = (torch.randn(3, 2999, generator=gen) + 1e-3).to(dtype)
    a = x.abs().reshape(-1).float()
    t = float(torch.kthvalue(a, int(0.97 * a.numel())).values)
    return (x.to(device=device), t)


#: name -> spec, for the GPU check (``frontier_opt.kernels`` entry point).
KERNELS: dict[str, KernelSpec] = {
    "stochastic_quantize": KernelSpec(
        stochastic_quantize,
        stochastic_quantize_reference,
        stochastic_quantize_triton,
        _quantize_example,
    ),
    "int8_quantize": KernelSpec(
        int8_quantize, int8_quantize_reference, int8_quantize_triton, _int8_example
    ),
    "threshold_select": KernelSpec(
        threshold_select, threshold_select_reference, threshold_select_triton, _threshold_example
    ),
}

__all__ = [
    "KERNELS",
    "int8_quantize",
    "int8_quantize_reference",
    "int8_quantize_triton",
    "stochastic_quantize",
    "stochastic_quantize_reference",
    "stochastic_quantize_triton",
    "threshold_select",
    "threshold_select_reference",
    "threshold_select_triton",
]
