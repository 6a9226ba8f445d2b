"""Triton kernels of trak-theory, each beside its plain-torch reference (shared-core's pattern:
``<name>_reference``, ``<name>_triton``, the ``torch.library`` op, and a ``KernelSpec`` entry
in :data:`KERNELS` for the GPU check)."""

import torch

from shared_core.kernels import KernelSpec

from .sketch import (
    KINDS,
    seed_words,
    sketch_block_reference,
    sketch_block_triton,
    sketch_project,
    sketch_project_reference,
    sketch_project_triton,
)


def _sketch_example(device, dtype, gen):
    # odd sizes: no multiple of any tile, a nonzero row offset, Rademacher sketch
    g = torch.randn(37, 301, generator=gen).to(device=device, dtype=dtype)
    return (g, 11, 45, "rademacher", 5)


#: name -> spec, iterated by GPU checks like shared-core's.
KERNELS = {
    "sketch_project": KernelSpec(
        sketch_project,
        sketch_project_reference,
        sketch_project_triton,
        _sketch_example,
        rtol={torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3},
    ),
}

__all__ = [
    "KERNELS",
    "KINDS",
    "seed_words",
    "sketch_block_reference",
    "sketch_block_triton",
    "sketch_project",
    "sketch_project_reference",
    "sketch_project_triton",
]
