"""What a benchmark number depends on, recorded next to it.

A ratio measured on one CPU can flip on another: bf16 GEMM runs on AMX tiles on one Xeon and
is emulated on an AVX-512 EPYC; MKL picks a code path per CPU (``MKL_CBWR``). So every result
carries the CPU model and the instruction-set flags that matter, the BLAS torch was built with
and its version, the thread settings, and a short GEMM throughput probe per dtype, which says
in one number how fast this machine is at the work most benchmarks are made of.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

__all__ = ["blas_info", "cpu_info", "environment", "gemm_throughput", "git_commit"]

# Instruction-set flags that change which GEMM and LAPACK kernels run.
_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_CBWR")


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


def cpu_info(cpuinfo: str | None = None) -> dict[str, Any]:
    """The CPU model and which of the GEMM-relevant instruction-set flags it has.

    Args:
        cpuinfo: the text of ``/proc/cpuinfo`` (read when None; empty off Linux).

    Returns:
        ``{"model": str, "flags": [present flags among avx2, fma, avx512f, ...]}``.
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    flags = re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    have = set(flags.group(1).split()) if flags else set()
    return {
        "model": model.group(1).strip() if model else (platform.processor() or platform.machine()),
        "flags": [f for f in _FLAGS if f in have],
    }


def blas_info(config: str | None = None) -> dict[str, Any]:
    """The BLAS and LAPACK torch was built with, their version where torch reports it, and the
    CPU capability torch dispatches to (from ``torch.__config__.show()`` unless given)."""
    config = torch.__config__.show() if config is None else config

    def field(pattern: str) -> str | None:
        m = re.search(pattern, config)
        return m.group(1).strip() if m else None

    return {
        "blas": field(r"BLAS_INFO=([^,\s]+)"),
        "lapack": field(r"LAPACK_INFO=([^,\s]+)"),
        "mkl_version": field(r"Math Kernel Library Version ([^\n]+?)(?: Product|-Product|\n|$)"),
        "openblas_version": field(r"OpenBLAS ([0-9][^\s,]*)"),
        "cpu_capability": field(r"CPU capability usage: ([^\n]+)"),
    }


def gemm_throughput(
    device: str | torch.device = "cpu", seconds: float = 1.0, n: int | None = None
) -> dict[str, float]:
    """Measured square-GEMM throughput in GFLOP/s per dtype (float32, bfloat16).

    Each dtype gets half of ``seconds``: one warm-up product, then products until its time is
    up. It is a probe, not a benchmark: its job is to say how fast this machine is at the work
    the recorded ratios are made of (a bf16 figure 3x below float32 means bf16 is emulated).

    Args:
        device: where to run the probe.
        seconds: total wall time of the probe.
        n: matrix side (default 1024 on the CPU, 8192 on a GPU).
    """
    device = torch.device(device)
    n = n or (8192 if device.type == "cuda" else 1024)
    gen = torch.Generator().manual_seed(0)
    out: dict[str, float] = {}
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(n, n, generator=gen).to(device, dtype)
        b = torch.randn(n, n, generator=gen).to(device, dtype)
        (a @ b).sum().item()  # warm-up (and a sync on a GPU)
        count, t0 = 0, time.perf_counter()
        while True:
            c = a @ b
            count += 1
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds / 2:
                break
        del c
        out[str(dtype).removeprefix("torch.")] = round(2 * n**3 * count / elapsed / 1e9, 1)
    return out


def environment(device: str | torch.device = "cpu", probe: bool = False) -> dict[str, Any]:
    """Versions, machine, BLAS and thread settings of this process, as a JSON-ready dict.

    Args:
        device: the device the results were measured on.
        probe: also measure GEMM throughput per dtype (:func:`gemm_throughput`, one second).
    """
    device = torch.device(device)
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu": cpu_info(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "thread_env": {v: os.environ[v] for v in _THREAD_VARS if v in os.environ},
        "blas": blas_info(),
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
    if probe:
        env["gemm_gflops"] = gemm_throughput(device)
    return env
