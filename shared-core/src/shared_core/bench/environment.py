"""What a benchmark number depends on, recorded next to it."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

__all__ = ["environment", "git_commit"]


def git_commit(cwd: str | os.PathLike[str] | None = None) -> str | None:
    """The current git commit (with ``-dirty`` when the tree has changes), or None outside git."""
    cwd = Path(cwd) if cwd is not None else Path.cwd()
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{sha}-dirty" if dirty else sha


def environment(device: str | torch.device = "cpu") -> dict[str, Any]:
    """Versions, device and thread settings of this process, as a JSON-ready dict."""
    device = torch.device(device)
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "git_commit": git_commit(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET", "0") == "1",
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if device.type == "cuda" and torch.cuda.is_available():
        idx = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        env["gpu"] = props.name
        env["gpu_memory_bytes"] = props.total_memory
        env["cuda"] = torch.version.cuda
    return env
