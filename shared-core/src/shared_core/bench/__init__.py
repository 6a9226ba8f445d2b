"""The benchmark harness every frontier-opt benchmark uses.

- :func:`time_fn`: warm-up, repeats, median/min/max, CUDA events on GPU, peak memory.
- :func:`compare`: a candidate and a baseline interleaved in one run, ratio pair by pair.
- :func:`write_json`: results plus the environment (CPU model and flags, BLAS and its version,
  threads, a GEMM throughput probe, versions, device, git commit).

Example:
    >>> import torch
    >>> from shared_core.bench import compare
    >>> x = torch.randn(128, 128)
    >>> r = compare(lambda: x @ x.T, lambda: x @ x, name="xxT", warmup=1, repeats=3)
    >>> r.ratio_median > 0
    True
"""

from .environment import blas_info, cpu_info, environment, gemm_throughput, git_commit
from .report import markdown_table, write_json
from .timing import ComparisonResult, TimingStats, compare, time_fn

__all__ = [
    "ComparisonResult",
    "TimingStats",
    "blas_info",
    "compare",
    "cpu_info",
    "environment",
    "gemm_throughput",
    "git_commit",
    "markdown_table",
    "time_fn",
    "write_json",
]
