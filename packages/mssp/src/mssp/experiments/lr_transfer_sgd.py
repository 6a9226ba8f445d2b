"""lr-transfer with SGD in regime II (N, M, K grow): where does each scheme's optimal lr go?

Setup: as in :mod:`mssp.experiments.lr_transfer` (same task, shapes, steps, seeds, common
random numbers), with plain SGD (no momentum) over the SGD log2 grid of the mode, in regime
II only (the issue asks for SGD in one regime; II is where muP and MSSP's SGD tables differ
by a factor k in the expert and router learning rates).

Rule (fixed before the first run): none; this experiment reports the optimal lr per size and
its drift in grid steps (max minus min grid index, a step being a factor 2) for SP, muP and
MSSP, and whether an optimum sits at the grid's edge. It is the SGD companion of
lr-transfer's Adam verdict and is not part of it.
"""

from __future__ import annotations

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress, run_experiment

from ..tables import SCHEMES
from ._sweep import config
from .lr_transfer import sweep

NAME = "mssp.lr-transfer-sgd"


def run(ctx: RunContext) -> ExperimentResult:
    cfg = config(ctx.quick, ctx.full)
    grid = cfg.log2_lrs["sgd"]
    with progress(total=len(SCHEMES) * len(cfg.scales) * len(grid), desc=NAME) as bar:
        rows = sweep(cfg, "sgd", ("II",), SCHEMES, bar, ctx.seed)
    line_plot(
        ctx.path("optimal_lr_sgd.png"),
        {r["scheme"]: (list(cfg.scales), r["log2_lr_opt"]) for r in rows},
        title="optimal SGD learning rate vs size, regime II",
        xlabel="size factor s",
        ylabel="log2 optimal lr",
        logx=True,
    )
    measured = ", ".join(
        f"{r['scheme']} {r['drift']} (log2 lr* {r['log2_lr_opt']}"
        + (", at grid edge)" if r["at_grid_edge"] else ")")
        for r in rows
    )
    return ExperimentResult(
        title="Optimal SGD learning rate across sizes in regime II (reported, no verdict)",
        claim=(
            "With SGD too, the optimal lr transfers across sizes under MSSP (arXiv 2605.14200; "
            "reported here without a verdict)."
        ),
        summary=(
            f"SGD, regime II, sizes s = {list(cfg.scales)} of base {cfg.base}, {cfg.steps} "
            f"steps, batch {cfg.batch}, {cfg.sweep_seeds} seed(s) from --seed {ctx.seed}, "
            f"log2 lr grid {list(grid)}. Drift in grid steps: {measured}."
        ),
        metrics={
            "drift": {r["scheme"]: r["drift"] for r in rows},
            "log2_lr_opt": {r["scheme"]: r["log2_lr_opt"] for r in rows},
            "at_grid_edge": {r["scheme"]: r["at_grid_edge"] for r in rows},
            "curves": {f"sgd_{r['scheme']}_II": r["curves"] for r in rows},
            "log2_lrs": {"sgd": list(grid)},
        },
        holds=None,
        plots=["optimal_lr_sgd.png"],
        table=[
            {
                "scheme": r["scheme"],
                "log2 lr* per size": " ".join(str(v) for v in r["log2_lr_opt"]),
                "drift (grid steps)": r["drift"],
                "optimum at grid edge": r["at_grid_edge"],
                "best loss per size": " ".join(f"{v:.4f}" for v in r["best_loss"]),
            }
            for r in rows
        ],
        paper="P08",
        measured=f"SGD regime II lr* drift in grid steps: {measured}",
    )


def main(argv=None) -> int:
    return run_experiment(run, name=NAME, description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
