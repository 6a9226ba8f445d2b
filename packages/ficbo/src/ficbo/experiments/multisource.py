r"""multisource: with one good and one useless source, does FICBO find and follow the good one?

A FICBO model with two source slots is pretrained on the prior (each source of each task
absent with probability 0.2, and all sources absent in 20% of the batches; same size and
budget as the ``synthetic`` quick models). Held-out tasks in ``d = 2`` (pools of 30 points)
carry two sources that score every point with noise 0.1 and random warps: source A with
relevance :math:`\rho_A = 0.9`, source B with :math:`\rho_B = 0`; which slot holds A is drawn
per task. 1 random start + 10 EI queries. Compared: FICBO, random search, and "trust blindly"
(argmax of the mean of the two standardized sources). After FICBO's run the trust read-out
(:func:`ficbo.model.feedback_sensitivity`) is taken per source.

Rule, fixed before the run: the claim holds iff FICBO's mean final simple regret is below
random search's with the paired bootstrap 95% interval of the difference below 0, **and** its
mean trust in source A exceeds its mean trust in source B with the paired interval of
(trust A - trust B) above 0. Trust-blindly is reported, not judged.
"""

from __future__ import annotations

import time

import torch

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress

from ..devices import resolve_device
from ..model import ModelConfig, feedback_sensitivity, pretrain, save
from ..optimize import blind_feedback_policy, model_policy, random_policy, run
from ..prior import evaluate, sample_tasks, standardize_feedback
from ._cli import main_with_device
from .synthetic import DIM, NOISE, paired_interval, sizes

#: Quick-mode wall seconds of the whole process on the shared 2-core CPU (measured).
QUICK_SECONDS = 22

RHO_A, RHO_B = 0.9, 0.0
METHODS = ("ficbo", "random", "trust-blindly")


def run_all(ctx: RunContext, device: str | torch.device | None = None) -> ExperimentResult:
    t0 = time.perf_counter()
    sz = sizes(ctx.quick)
    cfg = ModelConfig(max_dim=DIM, n_sources=2, d_model=sz["d_model"], d_ff=2 * sz["d_model"])
    bar = progress(total=sz["steps"], desc="pretrain ficbo (2 sources)")
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
    save(model, ctx.path("ficbo-2src.pt"))  # quick, seed 0: ficbo.pretrained("quick-ficbo-2src")
    n = sz["tasks"]
    g = torch.Generator().manual_seed(30_000 + ctx.seed)
    a_first = torch.rand(n, generator=g) < 0.5
    rho = torch.where(
        a_first[:, None],
        torch.tensor([[RHO_A, RHO_B]], dtype=torch.float64),
        torch.tensor([[RHO_B, RHO_A]], dtype=torch.float64),
    )
    tasks = sample_tasks(n, DIM, 2, generator=g, rho=rho, noise=NOISE, access=1.0)
    x = torch.rand(n, sz["points"], DIM, generator=g, dtype=torch.float64)
    f, fb = evaluate(tasks, x, generator=g)
    policies = {
        "ficbo": model_policy(model),
        "random": random_policy,
        "trust-blindly": blind_feedback_policy,
    }
    results = {k: run(x, f, fb, p, n_iter=sz["iters"], seed=ctx.seed) for k, p in policies.items()}
    q = results["ficbo"].queries
    fbs = standardize_feedback(fb)
    xh = torch.gather(x, 1, q[..., None].expand(-1, -1, DIM))
    trust = feedback_sensitivity(
        model, xh, torch.gather(f, 1, q), torch.gather(fbs, 2, q[:, None].expand(-1, 2, -1)), x, fbs
    ).double()
    idx_a = torch.where(a_first, 0, 1)
    trust_a = trust.gather(1, idx_a[:, None])[:, 0]
    trust_b = trust.gather(1, (1 - idx_a)[:, None])[:, 0]

    final = {k: r.simple_regret[:, -1] for k, r in results.items()}
    d_rand = paired_interval(final["ficbo"] - final["random"], seed=ctx.seed)
    d_trust = paired_interval(trust_a - trust_b, seed=ctx.seed)
    holds = bool(d_rand[2] < 0 and d_trust[1] > 0)
    metrics = {f"{k}/final_regret": float(v.mean()) for k, v in final.items()}
    metrics |= {
        "ficbo_minus_random": list(d_rand),
        "trust_A": float(trust_a.mean()),
        "trust_B": float(trust_b.mean()),
        "trust_A_minus_B": list(d_trust),
        "pretrain/tasks_per_second": stats["tasks_per_second"],
        "wall_seconds": time.perf_counter() - t0,
        "device": str(resolve_device(device)),
    }
    t_axis = list(range(q.shape[1]))
    line_plot(
        ctx.path("regret_two_sources.png"),
        {k: (t_axis, r.simple_regret.mean(0).tolist()) for k, r in results.items()},
        title=f"two sources: rho_A = {RHO_A}, rho_B = {RHO_B}",
        xlabel="queries after the first",
        ylabel="mean simple regret",
    )
    table = [{"method": k, "final_regret": round(metrics[f"{k}/final_regret"], 4)} for k in METHODS]
    summary = (
        f"{n} tasks, pool {sz['points']}, {sz['iters']} EI queries after 1 random; "
        f"final mean simple regret: "
        + ", ".join(f"{r['method']} {r['final_regret']:.3f}" for r in table)
        + f". FICBO - random: {d_rand[0]:+.3f} [{d_rand[1]:+.3f}, {d_rand[2]:+.3f}]. "
        f"Trust read-out: source A (rho {RHO_A}) {metrics['trust_A']:+.3f}, source B "
        f"(rho {RHO_B}) {metrics['trust_B']:+.3f}, A - B {d_trust[0]:+.3f} "
        f"[{d_trust[1]:+.3f}, {d_trust[2]:+.3f}]."
    )
    return ExperimentResult(
        title="FICBO follows the informative source and not the useless one",
        claim=(
            "Given several feedback sources of different relevance, the pretrained model "
            "weighs them by their in-context reliability and improves over random search."
        ),
        summary=summary,
        metrics=metrics,
        holds=holds,
        plots=["regret_two_sources.png"],
        table=table,
        paper="P04",
        measured=(
            f"FICBO - random {d_rand[0]:+.3f} [{d_rand[1]:+.3f}, {d_rand[2]:+.3f}]; trust A - B "
            f"{d_trust[0]:+.3f} [{d_trust[1]:+.3f}, {d_trust[2]:+.3f}]"
        ),
    )


def main(argv=None) -> int:
    return main_with_device(run_all, name="ficbo.multisource", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
