"""Triton kernels, each beside a plain-torch reference of the same function.

Every kernel module follows one pattern (copy :mod:`shared_core.kernels.sign_lmo` to add one):

1. ``<name>_reference``: plain torch, the CPU implementation and the test oracle;
2. ``<name>_triton``: the launcher; it takes CUDA tensors, or CPU tensors under
   ``TRITON_INTERPRET=1`` so that CPU-only test machines run the real kernel;
3. ``<name>``: a ``torch.library.custom_op`` named ``shared_core::<name>`` whose default
   implementation is the reference, with ``register_kernel("cuda")`` pointing at the launcher
   and a ``register_fake`` for ``torch.compile``;
4. a :class:`KernelSpec` entry in :data:`KERNELS` below (with a random-input factory), which
   ``tools/gpu_check.py`` and the tests iterate over.
"""

from __future__ import annotations

import torch

from ._triton import HAS_TRITON, autotune_configs, check_launchable, interpreting, require_triton
from .registry import KernelSpec
from .sign_lmo import sign_lmo, sign_lmo_reference, sign_lmo_triton


def _sign_lmo_example(device, dtype, gen):
    return (torch.randn(3, 1001, generator=gen).to(device=device, dtype=dtype), 0.37)


#: name -> spec. The GPU check compiles every entry and compares it with its reference.
KERNELS: dict[str, KernelSpec] = {
    "sign_lmo": KernelSpec(sign_lmo, sign_lmo_reference, sign_lmo_triton, _sign_lmo_example),
}

__all__ = [
    "HAS_TRITON",
    "KERNELS",
    "autotune_configs",
    "check_launchable",
    "require_triton",
    "KernelSpec",
    "interpreting",
    "sign_lmo",
    "sign_lmo_reference",
    "sign_lmo_triton",
]
