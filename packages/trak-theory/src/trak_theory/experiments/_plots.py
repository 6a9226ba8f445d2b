"""A scatter plot helper (headless matplotlib, imported lazily like shared_core's line_plot)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def scatter_plot(path, est, truth, highlight, *, title="", xlabel="", ylabel="") -> Path:
    """Scatter ``est`` against ``truth`` with the ``highlight`` mask drawn in another colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    est, truth, hi = np.asarray(est), np.asarray(truth), np.asarray(highlight, bool)
    fig, ax = plt.subplots(figsize=(4.5, 4))
    ax.scatter(truth[~hi], est[~hi], s=8, alpha=0.6, label="rest")
    ax.scatter(truth[hi], est[hi], s=14, color="C3", label="true top-q")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
