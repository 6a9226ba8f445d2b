"""Headless line plots for experiment results (matplotlib, imported only when plotting)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["line_plot"]

_DASHES = ("-", "--", ":", "-.")
# one marker shape per series: a line drawn exactly over another (two methods that coincide)
# still shows its own markers, placed at shifted points so they do not cover each other
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _pyplot():
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError("plotting needs matplotlib: pip install 'shared-core[plot]'") from err
    matplotlib.use("Agg", force=True)  # no display on CI machines and GPU boxes
    import matplotlib.pyplot as plt

    return plt


def line_plot(
    path: str | os.PathLike[str],
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    logx: bool = False,
    logy: bool = False,
    bands: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
    hlines: Mapping[str, float] | None = None,
) -> Path:
    """Draw one line per named series and save a PNG.

    Args:
        path: the PNG to write (parents created).
        series: label -> (x values, y values), equal lengths.
        title, xlabel, ylabel: text on the figure.
        logx, logy: logarithmic axes.
        bands: optional label -> (lower, upper) shaded around that series (spread over seeds).
        hlines: optional label -> y value drawn as a dashed horizontal reference.

    Returns:
        The path written.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.png"
        >>> line_plot(p, {"x^2": ([1, 2, 3], [1, 4, 9])}, logy=True).name
        'a.png'
    """
    if not series:
        raise ValueError("line_plot needs at least one series, got none")
    for label, (xs, ys) in series.items():
        if len(xs) != len(ys):
            raise ValueError(f"series {label!r}: {len(xs)} x values but {len(ys)} y values")
        if len(xs) == 0:
            raise ValueError(f"series {label!r} is empty")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    try:
        # past the colour cycle (10 colours), change the dash so no two series look alike
        n_colors = len(plt.rcParams["axes.prop_cycle"].by_key().get("color", [None]))
        for i, (label, (xs, ys)) in enumerate(series.items()):
            step = max(1, len(xs) // 8)
            (line,) = ax.plot(
                list(xs),
                list(ys),
                label=label,
                marker=_MARKERS[i % len(_MARKERS)],
                markevery=(i % step, step),
                markersize=5,
                fillstyle="full" if i % 2 == 0 else "none",
                linestyle=_DASHES[(i // n_colors) % len(_DASHES)],
            )
            if bands and label in bands:
                lo, hi = bands[label]
                ax.fill_between(list(xs), list(lo), list(hi), alpha=0.2, color=line.get_color())
        for label, y in (hlines or {}).items():
            ax.axhline(y, linestyle="--", color="gray", linewidth=1, label=label)
        ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
        if logx:
            ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
