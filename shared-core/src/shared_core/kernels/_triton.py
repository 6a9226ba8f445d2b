"""Where Triton comes from, and how kernels behave under its CPU interpreter.

Triton is an optional import: on platforms without a wheel (macOS, Windows, aarch64) every
op still works through its plain-torch reference. Under ``TRITON_INTERPRET=1`` Triton runs
kernels on CPU tensors; that mode is how the CPU test suite exercises the real kernels, and it
is slow, so autotuning there uses a single configuration.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

try:  # pragma: no cover - which branch runs depends on the platform
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover
    triton = None
    tl = None
    HAS_TRITON = False

__all__ = ["HAS_TRITON", "autotune_configs", "interpreting", "require_triton", "tl", "triton"]


def interpreting() -> bool:
    """True when Triton kernels run on the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def autotune_configs(configs: Sequence[Any]) -> list[Any]:
    """The configurations to autotune over: all of them on a GPU, the first under the interpreter.

    ``FRONTIER_TRITON_AUTOTUNE=first`` also keeps only the first on a GPU: a correctness check
    then compiles one kernel instead of every candidate (on a fresh machine a float32 SYRK
    autotune compiles for over a minute), while benchmarks keep the full search.

    Args:
        configs: ``triton.Config`` objects, best guess first.

    Returns:
        The list to hand to ``triton.autotune``.
    """
    if not configs:
        raise ValueError("autotune_configs needs at least one triton.Config, got none")
    first_only = interpreting() or os.environ.get("FRONTIER_TRITON_AUTOTUNE") == "first"
    return list(configs[:1]) if first_only else list(configs)


def require_triton(what: str) -> None:
    """Raise a clear error when a Triton launcher is called where Triton is not installed."""
    if not HAS_TRITON:
        raise RuntimeError(
            f"{what} needs Triton, which is not installed on this platform; "
            "call the op through torch.ops.shared_core (it falls back to the torch reference)"
        )


def check_launchable(*tensors: Any) -> None:
    """Triton launchers take CUDA tensors, or CPU tensors under the interpreter."""
    for t in tensors:
        if t.device.type == "cuda":
            continue
        if t.device.type == "cpu" and interpreting():
            continue
        raise ValueError(
            f"Triton launchers take CUDA tensors (or CPU tensors with TRITON_INTERPRET=1); "
            f"got a tensor on {t.device}"
        )
