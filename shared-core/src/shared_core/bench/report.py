"""Benchmark results to JSON and to a markdown table."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .environment import environment
from .timing import ComparisonResult, TimingStats

__all__ = ["markdown_table", "write_json"]


def _as_dict(r: Any) -> dict[str, Any]:
    if isinstance(r, ComparisonResult | TimingStats):
        return r.to_dict()
    if isinstance(r, dict):
        return r
    raise ValueError(f"cannot write a result of type {type(r).__name__} to JSON")


def write_json(
    path: str | os.PathLike[str],
    results: Sequence[ComparisonResult | TimingStats | dict[str, Any]],
    *,
    device: str = "cpu",
    probe: bool = True,
    **meta: Any,
) -> Path:
    """Write ``{"environment": ..., "results": [...], **meta}`` to ``path`` (parents created).

    Args:
        path: the JSON file to write.
        results: comparison or timing results (or plain dicts).
        device: the device the environment record describes.
        probe: include a one-second GEMM throughput probe in the record (the machine's speed
            at float32 and bfloat16 products, so a reader can tell which machine a ratio is from).
        **meta: extra top-level keys (the command that made the file, say).

    Returns:
        The path written.
    """
    if isinstance(results, ComparisonResult | TimingStats | dict):
        raise ValueError("results must be a list of results, not a single result")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "environment": environment(device, probe=probe),
        "results": [_as_dict(r) for r in results],
        **meta,
    }
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return path


def markdown_table(results: Iterable[ComparisonResult]) -> str:
    """A markdown table of comparisons: name, medians, ratio median [min, max]."""
    rows = [
        "| case | candidate median (ms) | baseline median (ms) | ratio median [min, max] |",
        "|---|---:|---:|---|",
    ]
    for r in results:
        rows.append(
            f"| {r.name} | {r.candidate.median_s * 1e3:.3f} | {r.baseline.median_s * 1e3:.3f} "
            f"| {r.ratio_median:.3f} [{r.ratio_min:.3f}, {r.ratio_max:.3f}] |"
        )
    return "\n".join(rows)
