"""Progress bars for anything that runs longer than a few seconds."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, TypeVar

from tqdm.auto import tqdm

__all__ = ["progress"]

T = TypeVar("T")


def progress(
    iterable: Iterable[T] | None = None,
    *,
    desc: str | None = None,
    total: int | None = None,
    disable: bool | None = None,
    **kwargs: Any,
) -> tqdm:
    """A tqdm bar with the suite's defaults.

    Bars go to stderr and refresh at most once a second, so CI logs stay short. Set
    ``FRONTIER_OPT_NO_PROGRESS=1`` to silence every bar (the repro runner does not: it shows
    the bars of the experiment it runs).

    Example:
        >>> sum(progress(range(3), desc="demo", disable=True))
        3
    """
    if total is not None and (isinstance(total, bool) or not isinstance(total, int) or total < 0):
        raise ValueError(f"total must be a non-negative int or None, got {total!r}")
    if disable is None:
        disable = os.environ.get("FRONTIER_OPT_NO_PROGRESS", "0") == "1"
    kwargs.setdefault("mininterval", 1.0)
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(iterable, desc=desc, total=total, disable=disable, **kwargs)
