r"""compression-bounds: measured error of compression learners vs their PAC bounds.

*Classical.* For thresholds, intervals, axis-aligned boxes in :math:`[0,1]^2`, unions of 3
intervals and halfplanes, draw a random target and :math:`m` uniform points, run
``compress -> reconstruct`` and measure the error on a fixed test set (20 000 uniform points).
The bound is Littlestone–Warmuth's with side information,
:math:`\varepsilon(m, k, \delta, |B|) = (\ln|B| + \ln\sum_{j\le k}\binom mj + \ln(1/\delta))/(m-k)`.

*High-arity.* For products of thresholds (k = 2, 3), rectangles (products of two intervals), the
3-partite sum-threshold class and bipartite halfplane graphs, draw :math:`m` uniform points per
factor, label all :math:`m^k` tuples, learn, and measure the error under the product measure on
20 000 fresh i.i.d. tuples. The bound is
:math:`(k\ln\sum_{j\le s}\binom mj + \ln|B| + \ln(1/\delta))/(m-s)` in the number of factor
samples :math:`m` (:func:`learning_theory.bounds.high_arity_bound`).

``holds``: for every class and every :math:`m`, the fraction of draws whose error exceeds the
bound at :math:`\delta = 0.05` is at most :math:`\delta` (the bound's promise), over many draws.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress, run_experiment

from ..bounds import compression_bound, compression_bound_exact
from ..compression import (
    BoxScheme,
    CompressionLearner,
    HalfplaneScheme,
    IntervalScheme,
    ThresholdScheme,
    UnionOfIntervalsScheme,
)
from ..halfspaces import HalfspaceScheme
from ..high_arity import HighArityLearner, draw_grid
from ..samplers import HIGH_ARITY, draw, high_arity_target, random_target

#: Quick-mode wall seconds on a 2-core CPU (README: 41 s on a shared CPU);
#: `nox -s repro` plans its budget with it.
QUICK_SECONDS = 41

DELTA = 0.05
N_TEST = 20000

CLASSICAL = {
    "thresholds": ThresholdScheme(),
    "intervals": IntervalScheme(),
    "boxes": BoxScheme(2),
    "unions": UnionOfIntervalsScheme(3),
    "halfplanes": HalfplaneScheme(),
    "halfspaces3": HalfspaceScheme(3),
}


def classical_errors(name: str, m: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Errors of the compression learner over ``draws`` (target, sample) draws."""
    learner = CompressionLearner(CLASSICAL[name])
    out = np.empty(draws)
    for d in range(draws):
        f = random_target(name, rng)
        x = draw(name, f, m, rng)
        h = learner.fit(x, f(x))
        test = rng.uniform(0, 1, N_TEST if x.ndim == 1 else (N_TEST, x.shape[1]))
        out[d] = np.mean(h(test) != f(test))
    return out


def high_arity_errors(name: str, m: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Errors under the product measure of the high-arity learner over ``draws`` draws."""
    out = np.empty(draws)
    for d in range(draws):
        f, scheme, samplers = high_arity_target(name, rng)
        S = draw_grid(f, [s(rng, m) for s in samplers])
        h = HighArityLearner(scheme).fit(S)
        coords = [s(rng, N_TEST) for s in samplers]
        out[d] = np.mean(h(coords) != f(coords))
    return out


def config(quick: bool) -> dict[str, Any]:
    """Sample sizes and numbers of draws (``--quick`` or default)."""
    if quick:
        return {"ms_c": [20, 50, 100], "ms_h": [10, 20, 40], "draws_c": 100, "draws_h": 40}
    return {
        "ms_c": [20, 50, 100, 200, 400],
        "ms_h": [10, 20, 40, 80],
        "draws_c": 500,
        "draws_h": 200,
    }


def run(ctx: RunContext, cfg: dict[str, Any] | None = None) -> ExperimentResult:
    """Measure error quantiles against both bounds for every class and sample size."""
    cfg = cfg or config(ctx.quick)
    rng = np.random.default_rng(ctx.seed)
    ms_c, ms_h, draws_c, draws_h = cfg["ms_c"], cfg["ms_h"], cfg["draws_c"], cfg["draws_h"]
    jobs = [("classical", n, m) for n in CLASSICAL for m in ms_c]
    jobs += [("high-arity", n, m) for n in HIGH_ARITY for m in ms_h]
    table, metrics = [], {"delta": DELTA, "draws_classical": draws_c, "draws_high_arity": draws_h}
    series: dict[str, dict[str, tuple[list, list]]] = {"classical": {}, "high-arity": {}}
    ok_all = True
    for fam, name, m in progress(jobs, desc="compression-bounds"):
        if fam == "classical":
            s = CLASSICAL[name]
            errs = classical_errors(name, m, draws_c, rng)
            bound = compression_bound(m, s.size, DELTA, s.n_side)
            exact = compression_bound_exact(m, s.size, DELTA, s.n_side)
            k, arity, n_side = s.size, 1, s.n_side
        else:
            _, s, _ = high_arity_target(name, rng)
            errs = high_arity_errors(name, m, draws_h, rng)
            bound = HighArityLearner(s).bound(m, DELTA)
            exact = None
            k, arity, n_side = s.size, s.arity, s.n_side
        frac = float(np.mean(errs > bound))
        ok = frac <= DELTA
        ok_all &= ok
        q = float(np.quantile(errs, 1 - DELTA))
        row = {
            "family": fam,
            "class": name,
            "arity": arity,
            "k_or_s": k,
            "n_side": n_side,
            "m": m,
            "mean_err": round(float(errs.mean()), 5),
            "q95_err": round(q, 5),
            "bound": round(bound, 5),
            "bound_exact": None if exact is None else round(exact, 5),
            "frac_above_bound": frac,
            "holds": ok,
        }
        table.append(row)
        metrics[f"{fam}|{name}|m{m}|q95"] = row["q95_err"]
        metrics[f"{fam}|{name}|m{m}|bound"] = row["bound"]
        sr = series[fam]
        sr.setdefault(f"q95 {name}", ([], []))
        sr.setdefault(f"bound {name}", ([], []))
        sr[f"q95 {name}"][0].append(m)
        sr[f"q95 {name}"][1].append(max(q, 1e-5))
        sr[f"bound {name}"][0].append(m)
        sr[f"bound {name}"][1].append(bound)
    plots = []
    for fam, sr in series.items():
        fname = f"error_vs_bound_{fam}.png"
        line_plot(
            ctx.path(fname),
            sr,
            title=f"{fam}: 95% error quantile vs bound (delta={DELTA})",
            xlabel="m (sample size; per factor for high-arity)",
            ylabel="error",
            logx=True,
            logy=True,
        )
        plots.append(fname)
    ratio = {r["class"] + f"@{r['m']}": r["q95_err"] / r["bound"] for r in table}
    metrics["max_q95_over_bound"] = max(ratio.values())
    cols = [
        "family",
        "class",
        "m",
        "k_or_s",
        "n_side",
        "mean_err",
        "q95_err",
        "bound",
        "bound_exact",
        "frac_above_bound",
        "holds",
    ]
    lines = [
        f"delta={DELTA}; {draws_c} draws per classical cell, {draws_h} per high-arity cell; "
        f"error on {N_TEST} fresh points/tuples.",
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
        *["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in table],
        "",
        f"Largest 95%-quantile / bound ratio: {metrics['max_q95_over_bound']:.3f}. "
        f"Bound holds in every cell: {ok_all}.",
    ]
    return ExperimentResult(
        title="Compression implies learning: measured error below the compression bounds",
        claim=(
            "A (high-arity) sample compression scheme of size k (s per factor) yields a learner "
            "whose error is at most the compression bound with probability 1 - delta; in the "
            "high-arity case the bound is in the number m of factor samples."
        ),
        summary="\n".join(lines),
        metrics=metrics,
        holds=bool(ok_all),
        plots=plots,
        table=table,
        paper="P09",
        measured=(
            f"largest 95%-quantile error / bound = {metrics['max_q95_over_bound']:.3f} over "
            f"{len(table)} (class, m) cells; bound held in every cell: {ok_all}"
        ),
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m learning_theory.experiments.compression_bounds [--quick]``."""
    return run_experiment(
        run, name="learning-theory.compression-bounds", description=__doc__, argv=argv
    )


if __name__ == "__main__":
    raise SystemExit(main())
