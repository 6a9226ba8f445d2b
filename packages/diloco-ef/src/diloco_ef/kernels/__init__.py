"""Triton kernels of diloco-ef, each beside its plain-torch reference (shared-core's pattern).

:data:`KERNELS` is registered under the ``frontier_opt.kernels`` entry point, so that
``tools/gpu_check.py`` compiles and checks every kernel here against its reference.
"""

from __future__ import annotations

import torch

from shared_core.kernels import KernelSpec

from .quantize import stochastic_quantize, stochastic_quantize_reference, stochastic_quantize_triton


def _quantize_example(device, dtype, gen):
    # An odd length (a masked tail for every block size) and a multiplier that makes most
    # entries round between two of the 7 levels.
    x = torch.randn(3, 1001, generator=gen)
    u = torch.rand(3, 1001, generator=gen)
    mult = 7.0 / float(x.abs().max())
    return (x.to(device=device, dtype=dtype), u.to(device=device, dtype=dtype), mult, 7)


#: name -> spec, for the GPU check (``frontier_opt.kernels`` entry point).
KERNELS: dict[str, KernelSpec] = {
    "stochastic_quantize": KernelSpec(
        stochastic_quantize,
        stochastic_quantize_reference,
        stochastic_quantize_triton,
        _quantize_example,
    ),
}

__all__ = [
    "KERNELS",
    "stochastic_quantize",
    "stochastic_quantize_reference",
    "stochastic_quantize_triton",
]
