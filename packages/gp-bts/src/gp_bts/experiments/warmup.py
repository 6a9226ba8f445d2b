r"""warmup: batched TS with vs without the initial uncertainty-sampling (US) phase, equal budget.

Setting: as ``batch-scaling`` (GP-prior draws, SE lengthscale 0.15 on a 16 x 16 grid, noise
sd 0.1, the true prior known). Batch size :math:`Q = 8`, :math:`N` evaluations in all. ``bts``
runs BTS from the first round; ``bts-us`` spends its first ``US_ROUNDS`` rounds
(:math:`2Q = 16` evaluations) on pure-variance queries (greedy maximum posterior variance with
in-batch updates, what the earlier analyses prescribe before BTS) and then runs BTS. Same
objective, same noise stream and same seed for both (paired).

Rule (fixed before the run): the claim "the US phase is unnecessary, and ineffective in
practice" **holds** iff (a) the 95% paired-bootstrap interval of the mean cumulative-regret
difference :math:`R_N(\text{US}) - R_N(\text{no US})` lies above 0 (the warm-up costs regret)
and (b) the upper end of the interval of the mean final simple-regret difference
:math:`S_N(\text{no US}) - S_N(\text{US})` is at most 0.05 (one twentieth of the prior sd: BTS
without the warm-up does not end worse).

Sizes: quick :math:`N = 64` (8 rounds), 20 seeds; default :math:`N = 128`, 30 seeds.
"""

from __future__ import annotations

import torch

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress, run_experiment

from ..loop import run as bo_run
from ..models import KernelSpec
from . import _common as cm

#: Quick-mode wall seconds on a 2-core CPU (README: 11 s CPU under load, x1.5);
#: `nox -s repro` plans its budget with it.
QUICK_SECONDS = 17

Q = 8
US_ROUNDS = 2
SR_TOL = 0.05


def run(ctx: RunContext) -> ExperimentResult:
    return warmup(ctx, cm.PRIOR)


def warmup(ctx: RunContext, prior: KernelSpec) -> ExperimentResult:
    """The experiment on GP-prior draws of ``prior``; rule as above."""
    cm.quiet()
    n_evals, seeds = (64, 20) if ctx.quick else (128, 30)
    rounds = n_evals // Q
    cr = {p: torch.zeros(seeds, n_evals, dtype=torch.float64) for p in ("bts", "bts-us")}
    sr = {p: torch.zeros(seeds, n_evals, dtype=torch.float64) for p in ("bts", "bts-us")}
    bar = progress(total=2 * seeds, desc="warmup")
    for s in range(seeds):
        obj = cm.objective(ctx.seed + s, prior)
        for p in ("bts", "bts-us"):
            tr = bo_run(
                obj,
                batch_size=Q,
                rounds=rounds,
                policy=p,
                noise=cm.NOISE,
                seed=ctx.seed + s,
                us_rounds=US_ROUNDS,
            )
            cr[p][s], sr[p][s] = tr.cumulative_regret, tr.simple_regret
            bar.update()
    bar.close()
    pair_cr = torch.stack([cr["bts-us"][:, -1], cr["bts"][:, -1]], 1)
    pair_sr = torch.stack([sr["bts"][:, -1], sr["bts-us"][:, -1]], 1)
    d_cr = cm.bootstrap(lambda x: (x[:, 0] - x[:, 1]).mean(), pair_cr, seed=1)
    d_sr = cm.bootstrap(lambda x: (x[:, 0] - x[:, 1]).mean(), pair_sr, seed=2)
    holds = d_cr[1] > 0 and d_sr[2] <= SR_TOL

    png = f"warmup{cm.suffix(prior)}.png"
    xs = [float(Q * r) for r in range(1, rounds + 1)]
    series, bands = {}, {}
    for p, label in (("bts", "BTS (no US)"), ("bts-us", f"BTS after {US_ROUNDS} US rounds")):
        for what, curves in (("R_N", cr), ("S_N", sr)):
            m = curves[p][:, Q - 1 :: Q]
            mean, se = m.mean(0), m.std(0) / seeds**0.5
            series[f"{label}: {what}"] = (xs, mean.tolist())
            bands[f"{label}: {what}"] = ((mean - 2 * se).tolist(), (mean + 2 * se).tolist())
    line_plot(
        ctx.path(png),
        series,
        bands=bands,
        logy=True,
        title=f"Q = {Q}, {cm.prior_label(prior)}: with vs without the US warm-up",
        xlabel="evaluations",
        ylabel="mean cumulative (R_N) / simple (S_N) regret",
    )
    table = [
        {
            "policy": p,
            "R_N mean": float(cr[p][:, -1].mean()),
            "S_N mean": float(sr[p][:, -1].mean()),
            "S_N median": float(sr[p][:, -1].median()),
        }
        for p in ("bts", "bts-us")
    ]
    measured = (
        f"R_N(US) - R_N(no US) = {cm.fmt_ci(d_cr)}; S_N(no US) - S_N(US) = {cm.fmt_ci(d_sr)} "
        f"(Q={Q}, N={n_evals}, {seeds} seeds)"
    )
    summary = (
        f"Paired over {seeds} GP-prior draws ({cm.prior_label(prior)}), Q = {Q}, N = {n_evals}: "
        "BTS without the warm-up "
        f"has mean cumulative regret {float(cr['bts'][:, -1].mean()):.2f} against "
        f"{float(cr['bts-us'][:, -1].mean()):.2f} with {US_ROUNDS} US rounds "
        f"(difference US - no US {cm.fmt_ci(d_cr)}); final simple regret "
        f"{float(sr['bts'][:, -1].mean()):.3f} vs {float(sr['bts-us'][:, -1].mean()):.3f} "
        f"(difference no US - US {cm.fmt_ci(d_sr)}). Rule: (a) the first interval above 0 "
        f"and (b) the second's upper end <= {SR_TOL}."
    )
    return ExperimentResult(
        title="Batched TS needs no uncertainty-sampling warm-up"
        + ("" if prior == cm.PRIOR else f" ({cm.prior_label(prior)} prior)"),
        claim=(
            "The initial uncertainty-sampling phase the earlier analyses require is unnecessary: "
            "BTS without it has lower cumulative regret and no worse final simple regret."
        ),
        summary=summary,
        metrics={
            "prior": prior.name,
            "n_evals": n_evals,
            "seeds": seeds,
            "batch_size": Q,
            "us_rounds": US_ROUNDS,
            "cr_diff_us_minus_nous": d_cr[0],
            "cr_diff_ci_low": d_cr[1],
            "cr_diff_ci_high": d_cr[2],
            "sr_diff_nous_minus_us": d_sr[0],
            "sr_diff_ci_low": d_sr[1],
            "sr_diff_ci_high": d_sr[2],
        },
        holds=bool(holds),
        plots=[png],
        table=table,
        paper="P06",
        measured=measured,
    )


def main(argv=None):
    return run_experiment(run, name="gp-bts.warmup", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
