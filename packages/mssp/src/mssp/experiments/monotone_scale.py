"""monotone-scale: at each scheme's transferred learning rate, does the loss fall with size?

Setup: as in :mod:`mssp.experiments.lr_transfer` (same task, shapes, steps, grid; Adam). For
each regime and scheme the learning rate is tuned on the base size only (argmin of the held-out
loss over the grid), then every size s is trained at that same base learning rate; L(s) is its
held-out loss.

Rule (fixed before the first run). A scheme is monotone in a regime iff
L(s_{i+1}) <= 1.01 * L(s_i) for every consecutive pair of sizes (1 % slack for run-to-run
noise). The claim holds iff MSSP is monotone in every regime and muP is not monotone in at
least one regime (the paper's report). Each scheme's monotonicity per regime is reported.
"""

from __future__ import annotations

import itertools

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress, run_experiment

from ..tables import REGIMES, SCHEMES
from ._sweep import argmin_index, config, run_point

NAME = "mssp.monotone-scale"
SLACK = 1.01


def is_monotone(losses: list[float], slack: float = SLACK) -> bool:
    """``losses[i+1] <= slack * losses[i]`` for every i.

    Example:
        >>> is_monotone([1.0, 0.9, 0.905]), is_monotone([1.0, 1.2])
        (True, False)
    """
    return all(b <= slack * a for a, b in itertools.pairwise(losses))


def run(ctx: RunContext) -> ExperimentResult:
    cfg = config(ctx.quick, ctx.full)
    grid = cfg.log2_lrs["adam"]
    total = len(REGIMES) * len(SCHEMES) * (len(grid) + len(cfg.scales) - 1) * cfg.seeds
    rows, curves = [], {}
    with progress(total=total, desc=NAME) as bar:
        for regime in REGIMES:
            for scheme in SCHEMES:

                def loss(s, lr, scheme=scheme, regime=regime):
                    vals = [
                        run_point(cfg, regime, scheme, "adam", s, lr, 100 * ctx.seed + i)
                        for i in range(cfg.seeds)
                    ]
                    bar.update(cfg.seeds)
                    return sum(vals) / len(vals)

                base_curve = [loss(cfg.scales[0], 2.0**lg) for lg in grid]
                i = argmin_index(base_curve)
                lr = 2.0 ** grid[i]
                ls = [base_curve[i]] + [loss(s, lr) for s in cfg.scales[1:]]
                mono = is_monotone(ls)
                rows.append(
                    {
                        "regime": regime,
                        "scheme": scheme,
                        "log2 lr (tuned at base)": grid[i],
                        "loss per size": " ".join(f"{v:.4f}" for v in ls),
                        "monotone": mono,
                    }
                )
                curves[f"{scheme} {regime}"] = (list(cfg.scales), ls)
    mono = {(r["scheme"], r["regime"]): r["monotone"] for r in rows}
    a = all(mono[("mssp", g)] for g in REGIMES)
    b = not all(mono[("mup", g)] for g in REGIMES)
    line_plot(
        ctx.path("loss_vs_size.png"),
        curves,
        title="held-out loss at the base-tuned lr",
        xlabel="size factor s",
        ylabel="loss",
        logx=True,
        logy=True,
    )
    measured = "; ".join(
        f"{g}: " + ", ".join(f"{s} {'mono' if mono[(s, g)] else 'NOT mono'}" for s in SCHEMES)
        for g in REGIMES
    )
    return ExperimentResult(
        title="MSSP improves monotonically with scale at its transferred lr; muP does not",
        claim=(
            "At the learning rate tuned on the base model, MSSP's loss decreases with size in "
            "every regime, while muP's does not in some regime (arXiv 2605.14200)."
        ),
        summary=(
            f"Adam, sizes s = {list(cfg.scales)} of base {cfg.base}, {cfg.steps} steps, "
            f"{cfg.seeds} seed(s), lr tuned at s = 1 over log2 grid {list(grid)}. "
            f"Monotone (1 % slack): {measured}. MSSP monotone everywhere: {a}; muP "
            f"non-monotone somewhere: {b}."
        ),
        metrics={
            "monotone": {f"{s}_{g}": mono[(s, g)] for s in SCHEMES for g in REGIMES},
            "mssp_monotone_everywhere": a,
            "mup_non_monotone_somewhere": b,
        },
        holds=a and b,
        plots=["loss_vs_size.png"],
        table=rows,
        paper="P08",
        measured=measured,
    )


def main(argv=None) -> int:
    return run_experiment(run, name=NAME, description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
