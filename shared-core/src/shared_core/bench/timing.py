r"""Timing one callable, and a candidate against a baseline interleaved in one run.

Why interleave: on a shared or thermally throttled machine, conditions drift over a run. Timing
all candidate calls and then all baseline calls folds that drift into the ratio; alternating
them (C, B, B, C, C, B, ...) and taking the ratio pair by pair cancels most of it. The order
within a pair alternates so neither side always runs on a warmer cache.

On CUDA each call is bracketed by CUDA events (device time, no host-side launch jitter); on the
CPU by ``time.perf_counter`` with the thread count pinned for the run.
"""

from __future__ import annotations

import contextlib
import gc
import math
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

__all__ = ["ComparisonResult", "TimingStats", "compare", "time_fn"]


@dataclass(frozen=True)
class TimingStats:
    """Seconds per call over the timed repeats, and the peak memory seen while timing.

    ``peak_mem_bytes`` is the CUDA max-allocated bytes during the timed calls on a GPU, and on
    the CPU the process's peak resident set size (a high-water mark of the whole process: it
    only ever grows, so read it as an upper bound).
    """

    times_s: list[float]
    peak_mem_bytes: int | None

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def min_s(self) -> float:
        return min(self.times_s)

    @property
    def max_s(self) -> float:
        return max(self.times_s)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(median_s=self.median_s, min_s=self.min_s, max_s=self.max_s)
        return d


@dataclass(frozen=True)
class ComparisonResult:
    """Candidate vs baseline, measured interleaved. Ratios are candidate time / baseline time."""

    name: str
    candidate: TimingStats
    baseline: TimingStats
    ratios: list[float]
    device: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio_median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def ratio_min(self) -> float:
        return min(self.ratios)

    @property
    def ratio_max(self) -> float:
        return max(self.ratios)

    @property
    def speedup(self) -> float:
        """Baseline time over candidate time (> 1 means the candidate is faster)."""
        return 1.0 / self.ratio_median

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "device": self.device,
            "params": self.params,
            "candidate": self.candidate.to_dict(),
            "baseline": self.baseline.to_dict(),
            "ratios": self.ratios,
            "ratio_median": self.ratio_median,
            "ratio_min": self.ratio_min,
            "ratio_max": self.ratio_max,
            "speedup": self.speedup,
        }


def _resolve_device(device: str | torch.device) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"unknown device {device!r}: {err}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}: the harness times 'cpu' or 'cuda'")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but no CUDA device is available")
    return dev


def _check_counts(warmup: int, repeats: int) -> None:
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative int, got {warmup!r}")


def _check_callable(fn: Any, what: str) -> None:
    if fn is None:
        raise ValueError(f"{what} is missing: pass a zero-argument callable")
    if not callable(fn):
        raise ValueError(f"{what} must be a zero-argument callable, got {type(fn).__name__}")


def _cpu_peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports kilobytes, macOS bytes.
    return int(peak if sys.platform == "darwin" else peak * 1024)


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    if n is None:
        yield
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"threads must be a positive int or None, got {n!r}")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


class _Timer:
    def __init__(self, device: torch.device):
        self.device = device

    def __call__(self, fn: Callable[[], Any]) -> float:
        if self.device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return _cpu_peak_rss_bytes()


def time_fn(
    fn: Callable[[], Any],
    *,
    warmup: int = 3,
    repeats: int = 10,
    device: str | torch.device = "cpu",
    threads: int | None = None,
) -> TimingStats:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones.

    Args:
        fn: zero-argument callable; its return value is ignored.
        warmup: untimed calls first (compilation, caches, allocator), >= 0.
        repeats: timed calls, >= 1.
        device: ``"cpu"`` or ``"cuda[:i]"``; CUDA times with events.
        threads: pin ``torch.set_num_threads`` for the run (CPU), or None to leave it.

    Returns:
        :class:`TimingStats` with per-call seconds and the peak memory.

    Example:
        >>> import torch
        >>> x = torch.randn(64, 64)
        >>> stats = time_fn(lambda: x @ x, warmup=1, repeats=3)
        >>> len(stats.times_s)
        3
    """
    _check_callable(fn, "fn")
    _check_counts(warmup, repeats)
    dev = _resolve_device(device)
    timer = _Timer(dev)
    with _threads(threads):
        for _ in range(warmup):
            fn()
        _sync(dev)
        _reset_peak(dev)
        times = [timer(fn) for _ in range(repeats)]
        return TimingStats(times_s=times, peak_mem_bytes=_peak(dev))


def compare(
    candidate: Callable[[], Any],
    baseline: Callable[[], Any],
    *,
    name: str,
    warmup: int = 3,
    repeats: int = 10,
    device: str | torch.device = "cpu",
    threads: int | None = None,
    params: dict[str, Any] | None = None,
) -> ComparisonResult:
    """Time a candidate against a baseline, interleaved, and report the ratio pair by pair.

    Pair ``k`` runs both callables back to back (candidate first on even ``k``, baseline first on
    odd ``k``) and records ``t_candidate / t_baseline``. The median of those ratios is the figure
    to quote; min and max show the spread.

    Args:
        candidate: zero-argument callable under test.
        baseline: zero-argument callable it is compared against (required).
        name: label of this comparison in the JSON.
        warmup: untimed calls of each side before timing, >= 0.
        repeats: timed pairs, >= 1.
        device: ``"cpu"`` or ``"cuda[:i]"``.
        threads: pin the CPU thread count for the run, or None.
        params: free-form description (shape, dtype, ...) stored with the result.

    Returns:
        A :class:`ComparisonResult`; ``ratio_median < 1`` means the candidate is faster.

    Example:
        >>> import torch
        >>> x = torch.randn(32, 32)
        >>> r = compare(lambda: x @ x, lambda: torch.mm(x, x), name="mm", warmup=1, repeats=3)
        >>> len(r.ratios)
        3
    """
    _check_callable(candidate, "candidate")
    _check_callable(baseline, "baseline")
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    _check_counts(warmup, repeats)
    dev = _resolve_device(device)
    timer = _Timer(dev)
    with _threads(threads):
        for _ in range(warmup):
            candidate()
            baseline()
        _sync(dev)
        t_c: list[float] = []
        t_b: list[float] = []
        peak_c = peak_b = 0
        for k in range(repeats):
            order = ((candidate, t_c), (baseline, t_b))
            for fn, sink in order if k % 2 == 0 else order[::-1]:
                _reset_peak(dev)
                sink.append(timer(fn))
                if fn is candidate:
                    peak_c = max(peak_c, _peak(dev))
                else:
                    peak_b = max(peak_b, _peak(dev))
        ratios = [c / b if b > 0 else math.inf for c, b in zip(t_c, t_b, strict=True)]
    return ComparisonResult(
        name=name,
        candidate=TimingStats(t_c, peak_c),
        baseline=TimingStats(t_b, peak_b),
        ratios=ratios,
        device=str(dev),
        params=dict(params or {}),
    )
