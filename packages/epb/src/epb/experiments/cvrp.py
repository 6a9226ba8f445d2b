r"""cvrp: distil a POMO-style attention teacher into a program portfolio on CVRP20.

Same pipeline as :mod:`epb.experiments.tsp` with the CVRP seed bank (nearest feasible customer,
the savings rule, a demand-aware rule, and the Clarke--Wright construction as a step rule: follow
the savings solution's routes) and the CVRP search vocabulary, which adds the savings
primitives ``saving``, ``cw_link`` and ``cw_route`` (:mod:`epb.features`). Everything the
programs learn is still fitted to the teacher's per-step distributions (KL on teacher states).

The reference is PyVRP's solution of each shipped test instance (fixed iteration budget and
seed, :func:`epb.reference.pyvrp_routes`; near-optimal for CVRP20), so every gap is the excess
over a near-optimal solution. Baselines: nearest neighbour with capacity, and Clarke--Wright
savings (until the switch to PyVRP, savings was the reference itself).

Local search (:func:`epb.localsearch.improve`: 2-opt within routes, relocate and exchange
between routes, best improvement to a local optimum) is a fixed post-processing primitive, not
distilled (the teacher has no improvement step to imitate). It is applied in the same way, once
per instance, to the solution of every method (teacher, portfolio, nearest neighbour, savings;
for multi-start, to the best of the starts), giving the ``+ LS`` rows: Clarke--Wright + LS is
the like-for-like baseline of portfolio + LS.

Verdict (``holds``), unchanged: the portfolio's multi-start gap (construction only, no local
search) is within 1 percentage point of the teacher's and its top-1 agreement with the teacher
beats nearest neighbour's by 2 points. The rule never referred to savings; it compares two gaps
to the same reference, so switching that reference from savings to PyVRP keeps its meaning (the
1-point margin is now a fraction of the near-optimal length rather than of the savings length,
about 5 % stricter in absolute terms). Whether the portfolio (+ LS) beats Clarke--Wright (+ LS)
is reported in the metrics (``beats_savings``, ``beats_savings_after_ls``) but is not part of the
verdict, which is about distillation fidelity.
"""

from __future__ import annotations

from shared_core.experiment import ExperimentResult, RunContext, run_experiment, save_json

from ..heuristics import cvrp_nearest_neighbour, savings
from ..localsearch import routes_from_actions, savings_routes
from ..policy import load_teacher
from ..reference import load_test_set
from .distill import distil, evaluate, plots, read_out

CLASSICS = {"nearest neighbour": cvrp_nearest_neighbour, "savings": savings}
LS_CLASSICS = {
    "nearest neighbour": lambda inst: [
        routes_from_actions(a) for a in cvrp_nearest_neighbour(inst, return_actions=True)[1]
    ],
    "savings": savings_routes,
}


def config(quick: bool) -> dict:
    if quick:
        return dict(
            train_inst=30, train_starts=2, val_inst=15, iterations=3, test=100, candidates=4
        )
    return dict(train_inst=150, train_starts=4, val_inst=60, iterations=3, test=1000, candidates=6)


def run(ctx: RunContext) -> ExperimentResult:
    cfg = config(ctx.quick)
    teacher = load_teacher("cvrp", 20)
    port, hist, val, secs = distil(
        "cvrp",
        20,
        teacher,
        seed=ctx.seed,
        **{
            k: cfg[k]
            for k in ("train_inst", "train_starts", "val_inst", "iterations", "candidates")
        },
    )
    inst, ref = load_test_set("cvrp20", cfg["test"])
    gaps, _singles, _best = evaluate(
        "cvrp",
        teacher,
        port,
        inst,
        ref,
        CLASSICS,
        chunk=32,
        desc="CVRP20 gaps",
        ls_classics=LS_CLASSICS,
    )
    reading = read_out(port, val)
    fid = port.fidelity(val)
    plot_files = plots(ctx, "cvrp20", hist, reading, port)
    ctx.path("portfolio_cvrp20.py").write_text(reading["code"] + "\n")
    metrics = {
        "gaps": gaps,
        "reference": "PyVRP (see epb.reference.pyvrp_routes)",
        "val_agreement": fid["agreement"],
        "val_kl": fid["kl"],
        "nn_agreement": reading["nn_agreement"],
        "programs": port.k,
        "beats_savings": gaps["portfolio multi-start"] < gaps["savings"],
        "beats_savings_after_ls": gaps["portfolio multi-start + LS"] < gaps["savings + LS"],
        "test_instances": len(ref),
        "stage_weights": reading["stage_weights"],
        "resemblance": reading["resemblance"],
        "history": hist.records,
        "distil_seconds": secs,
        "teacher_meta": getattr(teacher, "checkpoint_meta", {}),
    }
    save_json(ctx.path("details.json"), metrics)
    ok = (
        gaps["portfolio multi-start"] <= gaps["teacher multi-start"] + 1.0
        and fid["agreement"] >= reading["nn_agreement"] + 0.02
    )
    summary = (
        f"CVRP20 ({len(ref)} test instances; gaps relative to PyVRP's solutions): teacher "
        f"{gaps['teacher greedy']:.2f}% greedy / {gaps['teacher multi-start']:.2f}% multi-start; "
        f"portfolio ({port.k} programs) {gaps['portfolio greedy']:.2f}% / "
        f"{gaps['portfolio multi-start']:.2f}%; Clarke-Wright savings {gaps['savings']:.2f}%; "
        f"nearest neighbour {gaps['nearest neighbour']:.2f}%. With the same local search on "
        f"every solution: "
        f"teacher {gaps['teacher multi-start + LS']:.2f}%, portfolio "
        f"{gaps['portfolio greedy + LS']:.2f}% greedy / {gaps['portfolio multi-start + LS']:.2f}% "
        f"multi-start, Clarke-Wright {gaps['savings + LS']:.2f}%, nearest neighbour "
        f"{gaps['nearest neighbour + LS']:.2f}%. Top-1 agreement {100 * fid['agreement']:.1f}% "
        f"(nearest neighbour {100 * reading['nn_agreement']:.1f}%).\n\n"
        f"```python\n{reading['code']}\n```"
    )
    return ExperimentResult(
        title="EPB distils a CVRP attention policy into a readable program portfolio",
        claim="EPB applies beyond TSP: the CVRP portfolio largely matches the teacher.",
        summary=summary,
        metrics=metrics,
        holds=ok,
        plots=plot_files,
        table=[{"method": k, "gap vs PyVRP %": round(v, 3)} for k, v in gaps.items()],
        paper="P02",
        measured=(
            f"portfolio {gaps['portfolio multi-start']:.2f}% vs teacher "
            f"{gaps['teacher multi-start']:.2f}% (vs PyVRP, multi-start); agreement "
            f"{100 * fid['agreement']:.0f}% vs NN {100 * reading['nn_agreement']:.0f}%; with LS "
            f"portfolio {gaps['portfolio multi-start + LS']:.2f}% vs Clarke-Wright "
            f"{gaps['savings + LS']:.2f}%"
        ),
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``python -m epb.experiments.cvrp [--quick]``."""
    return run_experiment(run, name="epb.cvrp", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
