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
from .ns_step import ns_step, ns_step_reference, ns_step_triton
from .registry import KernelSpec
from .sign_lmo import sign_lmo, sign_lmo_reference, sign_lmo_triton
from .syrk import syrk, syrk_reference, syrk_triton


def _sign_lmo_example(device, dtype, gen):
    return (torch.randn(3, 1001, generator=gen).to(device=device, dtype=dtype), 0.37)


def _syrk_example(device, dtype, gen):
    # Several row blocks of every tile size tried, none full: mirrored and masked stores.
    return (torch.randn(2, 301, 157, generator=gen).to(device=device, dtype=dtype),)


def _ns_step_example(device, dtype, gen):
    # Normalised as in msign (spectral norm <= 1), with the Muon quintic's coefficients.
    x = torch.randn(2, 157, 301, generator=gen, dtype=torch.float64)
    x = x / torch.linalg.matrix_norm(x, keepdim=True)
    return (x.to(device=device, dtype=dtype), 3.4445, -4.7750, 2.0315)


#: name -> spec. The GPU check compiles every entry and compares it with its reference.
KERNELS: dict[str, KernelSpec] = {
    "sign_lmo": KernelSpec(sign_lmo, sign_lmo_reference, sign_lmo_triton, _sign_lmo_example),
    "syrk": KernelSpec(syrk, syrk_reference, syrk_triton, _syrk_example),
    "ns_step": KernelSpec(ns_step, ns_step_reference, ns_step_triton, _ns_step_example),
}

__all__ = [
    "HAS_TRITON",
    "KERNELS",
    "KernelSpec",
    "autotune_configs",
    "check_launchable",
    "interpreting",
    "ns_step",
    "ns_step_reference",
    "ns_step_triton",
    "require_triton",
    "sign_lmo",
    "sign_lmo_reference",
    "sign_lmo_triton",
    "syrk",
    "syrk_reference",
    "syrk_triton",
]
