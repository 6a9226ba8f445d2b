"""Triton kernels, each beside a plain-torch reference of the same function.

Every kernel module follows one pattern (copy :mod:`shared_core.kernels.sign_lmo` to add one):

1. ``<name>_reference``: plain torch, the CPU implementation and the test oracle;
2. ``<name>_triton``: the launcher; it takes CUDA tensors, or CPU tensors under
   ``TRITON_INTERPRET=1`` so that CPU-only test machines run the real kernel;
3. ``<name>``: a ``torch.library.custom_op`` named ``shared_core::<name>`` whose default
   implementation is the reference, with ``register_kernel("cuda")`` pointing at the launcher
   and a ``register_fake`` for ``torch.compile``;
4. an entry in :data:`KERNELS` below, which the GPU check and the tests iterate over.
"""

from __future__ import annotations

from ._triton import HAS_TRITON, interpreting
from .sign_lmo import sign_lmo, sign_lmo_reference, sign_lmo_triton

#: name -> (op, reference, triton launcher). The GPU check compiles and compares every entry.
KERNELS = {
    "sign_lmo": (sign_lmo, sign_lmo_reference, sign_lmo_triton),
}

__all__ = [
    "HAS_TRITON",
    "KERNELS",
    "interpreting",
    "sign_lmo",
    "sign_lmo_reference",
    "sign_lmo_triton",
]
