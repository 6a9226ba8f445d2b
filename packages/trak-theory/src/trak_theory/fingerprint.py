"""Content fingerprints of tensors and checkpoints, so stored features are never reused for
other weights or other data.

A fingerprint is the SHA-256 of each tensor's dtype, shape and bytes (on the CPU, contiguous),
in a fixed order: two checkpoints share one only if every parameter is bitwise equal.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch
from torch import Tensor

__all__ = ["checkpoint_fingerprint", "tensor_fingerprint"]


def _update(h, t: Tensor) -> None:
    t = t.detach().to("cpu").contiguous()
    h.update(f"{t.dtype}|{tuple(t.shape)}|".encode())
    # bytes of the raw storage: bf16/fp16 have no numpy dtype, so hash through uint8
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def tensor_fingerprint(*tensors: Tensor) -> str:
    """SHA-256 hex digest of ``tensors`` (dtype, shape and bytes of each, in order).

    Example:
        >>> a = torch.arange(3.0)
        >>> tensor_fingerprint(a) == tensor_fingerprint(a.clone())
        True
        >>> tensor_fingerprint(a) == tensor_fingerprint(a + 1)
        False
    """
    h = hashlib.sha256()
    for t in tensors:
        _update(h, t)
    return h.hexdigest()


def checkpoint_fingerprint(checkpoint: Mapping[str, Tensor]) -> str:
    """SHA-256 hex digest of a state dict: its keys (sorted) and every tensor under them."""
    h = hashlib.sha256()
    for key in sorted(checkpoint):
        h.update(key.encode() + b"\0")
        value = checkpoint[key]
        if torch.is_tensor(value):
            _update(h, value)
        else:
            h.update(repr(value).encode())
    return h.hexdigest()
