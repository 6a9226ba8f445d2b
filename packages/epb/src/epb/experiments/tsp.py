r"""tsp: distil a POMO-style attention teacher into a program portfolio on TSP20 / TSP50.

The teacher is the shipped checkpoint ``data/teacher_tsp{n}.pt`` (TSP50 falls back to the TSP20
teacher when no TSP50 checkpoint is shipped; the summary says which was used). States are
collected from the teacher's greedy rollouts from several start nodes; EPB runs from a seed bank
(nearest neighbour, open-end cheapest insertion, farthest insertion) with the offline
expression proposer over the TSP vocabulary (:data:`epb.features.TSP_NODE_FEATURES`), whose
forward-selection move (``pursuit``) grows programs up to eight terms. Gaps are measured on the
shipped test sets against LKH-3 tours (elkai): teacher, portfolio, best single program (greedy
and best-of-``n`` starts), nearest neighbour and the nearest / farthest / cheapest insertion
heuristics.

Verdict (``holds``), on every size run: the portfolio's multi-start gap is within 1 percentage
point of the teacher's and below farthest insertion's, and its top-1 agreement with the teacher
exceeds nearest neighbour's by at least 2 points; on TSP20 the teacher's multi-start gap is at
most 1%.
"""

from __future__ import annotations

from shared_core.experiment import ExperimentResult, RunContext, run_experiment, save_json

from ..heuristics import insertion, nearest_neighbour
from ..policy import DATA, load_teacher
from ..reference import load_test_set
from .distill import distil, evaluate, plots, read_out

#: Quick-mode wall seconds on a 2-core CPU (README: 33 s CPU, 38 s wall);
#: `nox -s repro` plans its budget with it.
QUICK_SECONDS = 40

CLASSICS = {
    "nearest neighbour": nearest_neighbour,
    "nearest insertion": lambda i: insertion(i, "nearest"),
    "farthest insertion": lambda i: insertion(i, "farthest"),
    "cheapest insertion": lambda i: insertion(i, "cheapest"),
}


def config(quick: bool, n: int) -> dict:
    # pursuit + 8 terms: forward selection grows multi-term programs (README, greedy-gap table)
    if quick:
        return dict(
            train_inst=40,
            train_starts=2,
            val_inst=20,
            iterations=2,
            test=200,
            candidates=4,
            pursuit=True,
            max_terms=8,
        )
    if n <= 20:
        return dict(
            train_inst=200,
            train_starts=4,
            val_inst=80,
            iterations=3,
            test=1000,
            candidates=6,
            pursuit=True,
            max_terms=8,
        )
    return dict(
        train_inst=60,
        train_starts=4,
        val_inst=30,
        iterations=3,
        test=1000,
        candidates=6,
        pursuit=True,
        max_terms=8,
    )


def run_size(ctx: RunContext, n: int, cfg: dict):
    teacher_file = (
        f"teacher_tsp{n}.pt" if (DATA / f"teacher_tsp{n}.pt").exists() else ("teacher_tsp20.pt")
    )
    teacher = load_teacher("tsp", int(teacher_file[len("teacher_tsp") : -3]))
    port, hist, val, secs = distil(
        "tsp",
        n,
        teacher,
        seed=ctx.seed,
        **{
            k: cfg[k]
            for k in ("train_inst", "train_starts", "val_inst", "iterations", "candidates")
        },
        pursuit=cfg.get("pursuit", False),
        max_terms=cfg.get("max_terms", 6),
    )
    inst, ref = load_test_set(f"tsp{n}", cfg["test"])
    rows, singles, best = evaluate(
        "tsp", teacher, port, inst, ref, CLASSICS, chunk=64 if n <= 20 else 16, desc=f"TSP{n} gaps"
    )
    reading = read_out(port, val)
    fid = port.fidelity(val)
    return dict(
        n=n,
        teacher=teacher_file,
        teacher_meta=getattr(teacher, "checkpoint_meta", {}),
        gaps=rows,
        singles=singles,
        best_single=best,
        reading=reading,
        fidelity=fid,
        history=hist.records,
        log=hist.log,
        distil_seconds=secs,
        test_instances=len(ref),
        port=port,
        hist=hist,
    )


def run(ctx: RunContext) -> ExperimentResult:
    sizes = (20,) if ctx.quick else (20, 50)
    results, plot_files, table, checks = [], [], [], []
    metrics: dict = {}
    for n in sizes:
        r = run_size(ctx, n, config(ctx.quick, n))
        results.append(r)
        tag = f"tsp{n}"
        plot_files += plots(ctx, tag, r["hist"], r["reading"], r["port"])
        (ctx.path(f"portfolio_{tag}.py")).write_text(r["reading"]["code"] + "\n")
        g = r["gaps"]
        for name, v in g.items():
            table.append({"problem": f"TSP{n}", "method": name, "gap %": round(v, 3)})
        agree, nn_agree = r["fidelity"]["agreement"], r["reading"]["nn_agreement"]
        ok = (
            g["portfolio multi-start"] <= g["teacher multi-start"] + 1.0
            and g["portfolio multi-start"] < g["farthest insertion"]
            and agree >= nn_agree + 0.02
        )
        if n == 20:
            ok = ok and g["teacher multi-start"] <= 1.0
        checks.append(ok)
        metrics[tag] = {
            "gaps": g,
            "val_agreement": agree,
            "val_kl": r["fidelity"]["kl"],
            "nn_agreement": nn_agree,
            "programs": r["port"].k,
            "stage_weights": r["reading"]["stage_weights"],
            "agreement_by_stage": r["reading"]["agreement_by_stage_portfolio"],
            "nn_agreement_by_stage": r["reading"]["agreement_by_stage_nearest_neighbour"],
            "resemblance": r["reading"]["resemblance"],
            "history": r["history"],
            "teacher": r["teacher"],
            "teacher_meta": r["teacher_meta"],
            "distil_seconds": r["distil_seconds"],
            "test_instances": r["test_instances"],
        }
    save_json(
        ctx.path("details.json"), {k: {kk: vv for kk, vv in v.items()} for k, v in metrics.items()}
    )
    lines = []
    for r in results:
        g = r["gaps"]
        lines.append(
            f"**TSP{r['n']}** ({r['test_instances']} test instances, teacher {r['teacher']}): "
            f"teacher {g['teacher greedy']:.2f}% greedy / {g['teacher multi-start']:.2f}% "
            f"multi-start; portfolio ({r['port'].k} programs) {g['portfolio greedy']:.2f}% / "
            f"{g['portfolio multi-start']:.2f}%; farthest insertion "
            f"{g['farthest insertion']:.2f}%, nearest neighbour {g['nearest neighbour']:.2f}%. "
            f"Top-1 agreement with the teacher {100 * r['fidelity']['agreement']:.1f}% "
            f"(nearest neighbour {100 * r['reading']['nn_agreement']:.1f}%).\n\n"
            f"```python\n{r['reading']['code']}\n```"
        )
    head = results[0]
    measured = (
        f"TSP{head['n']}: portfolio {head['gaps']['portfolio multi-start']:.2f}% vs "
        f"teacher {head['gaps']['teacher multi-start']:.2f}% (multi-start); agreement "
        f"{100 * head['fidelity']['agreement']:.0f}% vs NN "
        f"{100 * head['reading']['nn_agreement']:.0f}%"
    )
    return ExperimentResult(
        title="EPB distils a TSP attention policy into a readable program portfolio",
        claim="The interpreted program portfolio largely matches the NCO teacher's performance, "
        "and its behaviour shifts across stages as a composition of classic heuristics.",
        summary="\n\n".join(lines),
        metrics=metrics,
        holds=all(checks),
        plots=plot_files,
        table=table,
        paper="P02",
        measured=measured,
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``python -m epb.experiments.tsp [--quick]``."""
    return run_experiment(run, name="epb.tsp", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
