r"""reliability: does the model's in-context trust in a source track the source's true relevance?

The shipped quick FICBO model (``ficbo.pretrained("quick-ficbo")``, the model of
``synthetic --quick --seed 0``; no retraining here) optimises fresh prior tasks in ``d = 2``
whose single source has relevance :math:`\rho \sim U[-1, 1]` (noise 0.1, random warp, every
point scored), 1 random start + 10 EI queries on 30-point pools. After ``k`` of its own
queries (``k = 1, 2, 3, 5, 8, 11``) the trust read-out :func:`ficbo.model.feedback_sensitivity`
(mean derivative of the predictive mean in the standardized feedback over the pool) is taken
with the first ``k`` queried points as history, and its Spearman rank correlation with the
true :math:`\rho` across tasks is measured (percentile bootstrap over tasks).

Rule, fixed before the run: the claim holds iff at the full history (``k = 11``) the
Spearman correlation is at least ``MIN_SPEARMAN = 0.5`` and its 95% interval excludes 0.
Expected shape (reported, not judged): the correlation grows with ``k``, since with one point
the sign of :math:`\rho` is not identifiable.
"""

from __future__ import annotations

import time

import torch

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress

from ..devices import resolve_device
from ..model import feedback_sensitivity, pretrained
from ..optimize import model_policy, run
from ..prior import evaluate, sample_tasks, standardize_feedback
from ._cli import main_with_device

#: Quick-mode wall seconds of the whole process on the shared 2-core CPU (measured).
QUICK_SECONDS = 12

MIN_SPEARMAN = 0.5
PREFIXES = (1, 2, 3, 5, 8, 11)
DIM, POOL, ITERS, NOISE = 2, 30, 10, 0.1


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman rank correlation of two 1-d samples (no ties expected: continuous data)."""
    if a.shape != b.shape or a.dim() != 1 or a.shape[0] < 3:
        raise ValueError(f"need two 1-d samples of equal length >= 3, got {a.shape}, {b.shape}")
    ra = a.argsort().argsort().double()
    rb = b.argsort().argsort().double()
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / torch.sqrt((ra**2).sum() * (rb**2).sum()))


def bootstrap_spearman(
    a: torch.Tensor, b: torch.Tensor, *, n_boot: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap 95% interval of :func:`spearman`, resampling pairs."""
    g = torch.Generator().manual_seed(seed)
    n = a.shape[0]
    vals = []
    for _ in range(n_boot):
        i = torch.randint(0, n, (n,), generator=g)
        vals.append(spearman(a[i], b[i]))
    v = torch.tensor(vals, dtype=torch.float64)
    lo, hi = torch.quantile(v, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return lo, hi


def run_all(ctx: RunContext, device: str | torch.device | None = None) -> ExperimentResult:
    t0 = time.perf_counter()
    n_tasks = 128 if ctx.quick else 512
    model = pretrained("quick-ficbo", device=device)
    g = torch.Generator().manual_seed(20_000 + ctx.seed)
    tasks = sample_tasks(n_tasks, DIM, 1, generator=g, noise=NOISE, access=1.0)
    x = torch.rand(n_tasks, POOL, DIM, generator=g, dtype=torch.float64)
    f, fb = evaluate(tasks, x, generator=g)
    res = run(x, f, fb, model_policy(model), n_iter=ITERS, seed=ctx.seed)
    fbs = standardize_feedback(fb)
    rho = tasks.rho[:, 0]
    table, metrics = [], {}
    corr = []
    for k in progress(PREFIXES, desc="history lengths"):
        q = res.queries[:, :k]
        xh = torch.gather(x, 1, q[..., None].expand(-1, -1, DIM))
        trust = feedback_sensitivity(
            model, xh, torch.gather(f, 1, q), torch.gather(fbs, 2, q[:, None]), x, fbs
        )[:, 0].double()
        r = spearman(trust, rho)
        lo, hi = bootstrap_spearman(trust, rho, seed=ctx.seed)
        corr.append(r)
        table.append(
            {"history": k, "spearman": round(r, 4), "ci_lo": round(lo, 4), "ci_hi": round(hi, 4)}
        )
        metrics[f"spearman/k={k}"] = [r, lo, hi]
    final = metrics[f"spearman/k={PREFIXES[-1]}"]
    holds = bool(final[0] >= MIN_SPEARMAN and final[1] > 0)
    line_plot(
        ctx.path("spearman_vs_history.png"),
        {"FICBO trust vs true rho": (list(PREFIXES), corr)},
        title="in-context reliability: Spearman(trust read-out, true relevance)",
        xlabel="history length k",
        ylabel="Spearman correlation",
        hlines={"rule threshold": MIN_SPEARMAN},
    )
    metrics["final_mean_simple_regret"] = float(res.simple_regret[:, -1].mean())
    metrics["wall_seconds"] = time.perf_counter() - t0
    metrics["device"] = str(resolve_device(device))
    lines = ["| history k | Spearman | 95% CI |", "|---|---|---|"]
    lines += [
        f"| {r['history']} | {r['spearman']:.3f} | [{r['ci_lo']:.3f}, {r['ci_hi']:.3f}] |"
        for r in table
    ]
    return ExperimentResult(
        title="FICBO's trust in a source tracks the source's true relevance",
        claim=(
            "At test time the model estimates source reliability in context by comparing "
            "observed objective values with the feedback."
        ),
        summary=f"{n_tasks} tasks, rho ~ U[-1, 1], shipped quick model.\n\n" + "\n".join(lines),
        metrics=metrics,
        holds=holds,
        plots=["spearman_vs_history.png"],
        table=table,
        paper="P04",
        measured=(
            f"Spearman(trust, rho) = {final[0]:.3f} [{final[1]:.3f}, {final[2]:.3f}] at k = "
            f"{PREFIXES[-1]}; at k = 1: {corr[0]:.3f}"
        ),
    )


def main(argv=None) -> int:
    return main_with_device(run_all, name="ficbo.reliability", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
