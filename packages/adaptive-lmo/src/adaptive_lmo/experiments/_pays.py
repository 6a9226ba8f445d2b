"""The shared protocol and verdict of the "where adaptivity pays" experiments (issue 33).

Each of :mod:`~adaptive_lmo.experiments.regression_head` and
:mod:`~adaptive_lmo.experiments.finetune` trains AdaptiveLMO (``exponent="auto"``),
``torch.optim.Muon`` (+ AdamW on what Muon cannot take) and AdamW, each on its own lr grid of
the same number of points (the same tuning budget; extended beyond an end point at its own
spacing up to ``extend`` points each), lr selected on mean validation loss over seeds; seed
``s`` shares the initialisation, the data order and (where drawn) the data split across
optimizers. Not judged: AdaptiveLMO at the fixed exponent 0 (:data:`A0`, the same machinery at
its Muon end: separates the criterion's exponents from the machinery), at 1 (:data:`A1`), and
"auto" with the sampled-target Fisher (:data:`FISHER`, ``fisher_backward`` every step: the
curvature that picks the brute-force exponent on the linear-network tests; this row was added
after the first quick runs, in which "auto" stayed at a = 0 throughout).

The rule (fixed before either experiment was first run): adaptivity **pays** in a setting
when AdaptiveLMO's test loss is lower than torch Muon's **and** lower than AdamW's, each by
the paired per-seed log ratio ``log(loss_AdaptiveLMO / loss_baseline)`` whose two-sided 95%
Student-t interval lies entirely below 0
(:func:`adaptive_lmo.experiments._common.paired_log_ratio`).
"""

from __future__ import annotations

import statistics
from typing import Any

from ._common import (
    SweepResult,
    final_exponents,
    grid_edges,
    log_grid,
    markdown_table,
    paired_log_ratio,
    sweep_metrics,
    table_rows,
)

__all__ = ["A0", "A1", "FISHER", "JUDGED", "grids", "judge", "variant"]

A0 = "AdaptiveLMO a=0"  # not judged: the family's Muon end through the same machinery
A1 = "AdaptiveLMO a=1"  # not judged: its SGD end
FISHER = "AdaptiveLMO sampled Fisher"  # not judged: "auto" with fisher_backward
JUDGED = ("Muon", "AdamW")


def grids(k: int, scale: float = 1.0) -> dict[str, list[float]]:
    """``k``-point lr grids, each over a factor 30 (the image experiment's ranges) times
    ``scale``; the AdaptiveLMO rows share one grid."""
    lmo = log_grid(0.01 * scale, 0.3 * scale, k)
    return {
        "AdaptiveLMO": lmo,
        "Muon": log_grid(0.01 * scale, 0.3 * scale, k),
        "AdamW": log_grid(1e-3 * scale, 3e-2 * scale, k),
        A0: lmo,
        A1: lmo,
        FISHER: lmo,
    }


def variant(opt: str, loss: str) -> tuple[str, dict[str, Any]]:
    """``(optimizer name, train_loop keywords)`` of a grid row (``loss``: the
    ``fisher_backward`` kind of the experiment's loss)."""
    kw = {A0: {"exponent": 0.0}, A1: {"exponent": 1.0}, FISHER: {"fisher": loss}}.get(opt)
    return ("AdaptiveLMO", kw) if kw is not None else (opt, {})


def judge(res: SweepResult, metric: str) -> tuple[bool, dict[str, Any], list[str]]:
    """The stated rule on a finished sweep: (pays, metrics, summary lines)."""
    metrics: dict[str, Any] = {**sweep_metrics(res, metric)}
    lines = [*markdown_table(table_rows(res, metric)), ""]
    pays = True
    for base in [*JUDGED, A0, A1, FISHER]:
        if base not in res.runs:
            continue
        c = paired_log_ratio(res, "AdaptiveLMO", base)
        judged = base in JUDGED
        if judged:
            pays = pays and c.significantly_lower
        metrics[f"log_ratio_vs[{base}]"] = [c.mean, c.lo, c.hi]
        metrics[f"log_ratio_per_seed_vs[{base}]"] = c.per_seed
        lines.append(
            f"AdaptiveLMO vs {base} ({'judged' if judged else 'not judged'}): log({metric} "
            f"ratio) {c.mean:+.4f} [{c.lo:+.4f}, {c.hi:+.4f}]"
        )
    for row in ("AdaptiveLMO", FISHER):
        if row not in res.runs:
            continue
        runs = res.runs[row][res.best_lr[row]]
        fin = final_exponents(runs)
        mean = {n: statistics.fmean(statistics.fmean(r.exponents[n]) for r in runs) for n in fin}
        key = "" if row == "AdaptiveLMO" else "fisher_"
        metrics.update({f"{key}final_exponent[{k}]": v for k, v in fin.items()})
        metrics.update({f"{key}mean_exponent[{k}]": v for k, v in mean.items()})
        lines.append(
            f"{row} exponents (mean over training / at the end, mean over seeds): "
            + ", ".join(f"{k} {mean[k]:.2f} / {fin[k]:.2f}" for k in fin)
        )
    edges = grid_edges(res, res.grids)
    metrics["lr_at_grid_edge"] = edges
    metrics.update({f"lr_grid[{o}]": g for o, g in res.grids.items()})
    metrics["pays"] = pays
    lines += [
        "lr at a grid edge: " + (", ".join(edges) or "none"),
        f"Adaptivity pays (rule: both judged intervals below 0): {'yes' if pays else 'no'}.",
    ]
    return pays, metrics, lines


def measured(res: SweepResult, metrics: dict[str, Any], what: str) -> str:
    """The report's one-line measurement: AdaptiveLMO against the judged baselines (and its
    own a = 0 row), with the paired log ratios of :func:`judge`'s ``metrics``."""
    tm = res.test_mean
    return (
        f"test {what} AdaptiveLMO {tm['AdaptiveLMO']:.4f} vs Muon {tm['Muon']:.4f}, AdamW "
        f"{tm['AdamW']:.4f} (its a=0 {tm[A0]:.4f}); vs Muon "
        f"{metrics['log_ratio_vs[Muon]'][0]:+.3f}, vs AdamW "
        f"{metrics['log_ratio_vs[AdamW]'][0]:+.3f} (paired log ratio)"
    )
