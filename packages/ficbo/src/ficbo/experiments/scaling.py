r"""scaling: four sources, partial access, and d up to 6 -- does FICBO still use its feedback?

One FICBO model with four source slots and inputs up to ``d = 6`` is pretrained in the run on
the prior (:mod:`ficbo.prior`: ``d`` drawn in 1..6 per batch, each source of each task absent
with probability 0.2 and all absent in 20% of the batches, each source scoring a point with
probability :math:`p \sim U[0.5, 1]`; same width and budget as the ``synthetic`` quick models).
Held-out tasks (pools of 30 uniform points, 1 random start + 10 EI queries, noise 0.1, random
warps), three settings:

- **four-sources** (``d = 2``): relevances :math:`(0.9, 0, 0, -0.3)` in a random slot order
  per task, every point scored;
- **partial-access** (``d = 2``): two sources, A (:math:`\rho = 0.9`) scoring each point with
  probability 0.5 (the rest ``NaN``), B (:math:`\rho = 0`) scoring every point, random slots;
- **d6** (``d = 6``): one source, :math:`\rho = 0.9`, every point scored.

Baselines: random search and "trust blindly" (argmax of the mean of the scored sources).

Rule, fixed before the run: in each setting, the claim holds iff FICBO's mean final simple
regret is below random search's with the paired bootstrap 95% interval of the difference
entirely below 0; in the two multi-source settings also the trust read-out
(:func:`ficbo.model.feedback_sensitivity`) of the informative source must exceed the mean
trust of the other sources with the paired interval above 0. The overall verdict holds iff it
holds in every setting. Trust-blindly is reported, not judged.
"""

from __future__ import annotations

import time

import torch

from shared_core.experiment import ExperimentResult, RunContext, progress

from ..devices import resolve_device
from ..model import ModelConfig, feedback_sensitivity, pretrain
from ..optimize import blind_feedback_policy, model_policy, random_policy, run
from ..prior import evaluate, sample_tasks, standardize_feedback
from ._cli import main_with_device
from .synthetic import NOISE, paired_interval, sizes

#: Quick-mode wall seconds of the whole process on the shared 2-core CPU, measured: 77 s
#: (72 s in run(), mostly pretraining) at load average ~5-8; 900 s at load average ~30.
QUICK_SECONDS = 77

MAX_DIM, N_SLOTS = 6, 4
#: setting -> (d, relevances, access of each source); source 0 is the informative one
SETTINGS = {
    "four-sources": (2, (0.9, 0.0, 0.0, -0.3), (1.0, 1.0, 1.0, 1.0)),
    "partial-access": (2, (0.9, 0.0), (0.5, 1.0)),
    "d6": (6, (0.9,), (1.0,)),
}
METHODS = ("ficbo", "random", "trust-blindly")


def make_tasks(setting: str, n: int, points: int, g: torch.Generator):
    """Pool, objective, feedback ``(n, S, points)`` and the slot of the informative source."""
    dim, rho, access = SETTINGS[setting]
    s = len(rho)
    # a random slot order per task: slot j holds source perm[j]
    perm = torch.stack([torch.randperm(s, generator=g) for _ in range(n)])
    rho_t = torch.tensor(rho, dtype=torch.float64)[perm]
    acc_t = torch.tensor(access, dtype=torch.float64)[perm]
    tasks = sample_tasks(n, dim, s, generator=g, rho=rho_t, noise=NOISE, access=acc_t)
    x = torch.rand(n, points, dim, generator=g, dtype=torch.float64)
    f, fb = evaluate(tasks, x, generator=g)
    return x, f, fb, perm.argmin(-1)  # slot of source 0


def run_all(ctx: RunContext, device: str | torch.device | None = None) -> ExperimentResult:
    t0 = time.perf_counter()
    sz = sizes(ctx.quick)
    cfg = ModelConfig(
        max_dim=MAX_DIM, n_sources=N_SLOTS, d_model=sz["d_model"], d_ff=2 * sz["d_model"]
    )
    bar = progress(total=sz["steps"], desc="pretrain ficbo (4 slots, d <= 6)")
    model, stats = pretrain(
        cfg,
        steps=sz["steps"],
        batch_size=sz["batch"],
        n_points=sz["points"],
        lr=2e-3,
        seed=ctx.seed,
        callback=lambda *_: bar.update(1),
        device=device,
    )
    bar.close()
    policies = {
        "ficbo": model_policy(model),
        "random": random_policy,
        "trust-blindly": blind_feedback_policy,
    }
    g = torch.Generator().manual_seed(40_000 + ctx.seed)
    metrics: dict = {"pretrain/tasks_per_second": stats["tasks_per_second"]}
    table, verdicts = [], []
    for setting in SETTINGS:
        x, f, fb, good = make_tasks(setting, sz["tasks"], sz["points"], g)
        res = {k: run(x, f, fb, p, n_iter=sz["iters"], seed=ctx.seed) for k, p in policies.items()}
        final = {k: r.simple_regret[:, -1] for k, r in res.items()}
        d_rand = paired_interval(final["ficbo"] - final["random"], seed=ctx.seed)
        ok = d_rand[2] < 0
        row = {"setting": setting, "d": SETTINGS[setting][0], "sources": fb.shape[1]}
        row |= {k: round(float(v.mean()), 4) for k, v in final.items()}
        row["ficbo-random"] = [round(v, 4) for v in d_rand]
        row["trust good - rest"] = None  # one source: nothing to compare
        if fb.shape[1] > 1:
            q = res["ficbo"].queries
            fbs = standardize_feedback(fb)
            dim = x.shape[-1]
            xh = torch.gather(x, 1, q[..., None].expand(-1, -1, dim))
            fbh = torch.gather(fbs, 2, q[:, None].expand(-1, fb.shape[1], -1))
            trust = feedback_sensitivity(model, xh, torch.gather(f, 1, q), fbh, x, fbs).double()
            t_good = trust.gather(1, good[:, None])[:, 0]
            t_rest = (trust.nansum(1) - t_good) / (fb.shape[1] - 1)
            d_trust = paired_interval(t_good - t_rest, seed=ctx.seed)
            ok = ok and d_trust[1] > 0
            row["trust good - rest"] = [round(v, 4) for v in d_trust]
        row["holds"] = bool(ok)
        verdicts.append(ok)
        table.append(row)
        metrics |= {f"{setting}/{k}/final_regret": row[k] for k in METHODS}
        metrics[f"{setting}/ficbo_minus_random"] = row["ficbo-random"]
        metrics[f"{setting}/trust_good_minus_rest"] = row["trust good - rest"]
    holds = bool(all(verdicts))
    metrics["wall_seconds"] = time.perf_counter() - t0
    metrics["device"] = str(resolve_device(device))
    lines = [
        f"- {r['setting']} (d = {r['d']}, {r['sources']} source(s)): FICBO {r['ficbo']:.3f}, "
        f"random {r['random']:.3f}, trust-blindly {r['trust-blindly']:.3f}; FICBO - random "
        f"{r['ficbo-random'][0]:+.3f} [{r['ficbo-random'][1]:+.3f}, {r['ficbo-random'][2]:+.3f}]"
        + (
            f"; trust informative - others {r['trust good - rest'][0]:+.3f} "
            f"[{r['trust good - rest'][1]:+.3f}, {r['trust good - rest'][2]:+.3f}]"
            if r["trust good - rest"] is not None
            else ""
        )
        + f" -> {'holds' if r['holds'] else 'does not hold'}"
        for r in table
    ]
    summary = (
        f"{sz['tasks']} tasks per setting, pools of {sz['points']}, 1 random start + "
        f"{sz['iters']} EI queries; final mean simple regret:\n\n" + "\n".join(lines)
    )
    return ExperimentResult(
        title="FICBO with four sources, partial access and d = 6",
        claim=(
            "The feedback prior and model cover more than two sources, sources that score only "
            "part of the candidates, and inputs up to d = 6; the pretrained model still "
            "beats random search and trusts the informative source most."
        ),
        summary=summary,
        metrics=metrics,
        holds=holds,
        table=table,
        paper="P04",
        measured="; ".join(
            f"{r['setting']}: FICBO - random {r['ficbo-random'][0]:+.3f}" for r in table
        ),
    )


def main(argv=None) -> int:
    return main_with_device(run_all, name="ficbo.scaling", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
