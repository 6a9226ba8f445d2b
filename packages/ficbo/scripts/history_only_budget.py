"""Does a longer pretraining make the history-only model beat random search?

Cited by the README (pretraining budget). The quick history-only model (300 steps x 16 tasks,
d_model 32) is worse than random search (`history_only_vs_random.py`); this script measures
bigger budgets on the same evaluation: 256 fresh prior tasks per dimension d = 1, 2, pools of
30 points, 1 random start (paired with random search), EI queries, simple regret after 3, 6
and 10 queries, paired bootstrap 95% intervals of (history-only - random).

Rule, fixed before the run: a budget **beats random search** iff the interval after 10 queries
lies entirely below 0 in both d = 1 and d = 2.

Run from the repository root, one budget per call (the default-size model of `synthetic` is
evaluated from its checkpoint, a new budget is pretrained here):

    python packages/ficbo/scripts/history_only_budget.py --checkpoint RUN/history-only.pt \
        --label default-1500x64
    python packages/ficbo/scripts/history_only_budget.py --steps 4000 --batch 64 \
        --d-model 64 --label long-4000x64 --save history_only_long.pt --gp

`--gp` adds BoTorch GP-EI on the same tasks (reported beside the rule). Each call adds its
budget to `packages/ficbo/docs/results/history_only_budget.json`.
"""

import argparse
import json
import time
from pathlib import Path

import torch

from ficbo.experiments.synthetic import paired_interval
from ficbo.model import ModelConfig, load, pretrain, save
from ficbo.optimize import model_policy, random_policy, run
from ficbo.prior import evaluate, sample_tasks

RESULTS = Path("packages/ficbo/docs/results/history_only_budget.json")


def evaluate_against_random(model, gp: bool = False) -> dict:
    """The tasks and seeds of `history_only_vs_random.py`, so the numbers are comparable.

    With ``gp``, BoTorch GP-EI on the same tasks and first points is reported beside it (not
    part of the rule).
    """
    out = {}
    for d in (1, 2):
        g = torch.Generator().manual_seed(50_000 + d)
        n = 256
        tasks = sample_tasks(n, d, 0, generator=g)
        x = torch.rand(n, 30, d, generator=g, dtype=torch.float64)
        f, fb = evaluate(tasks, x, generator=g)
        h = run(x, f, fb, model_policy(model), n_iter=10, seed=0).simple_regret
        r = run(x, f, fb, random_policy, n_iter=10, seed=0).simple_regret
        if gp:
            from ficbo.baselines import gp_ei_policy

            e = run(x, f, fb, gp_ei_policy(), n_iter=10, seed=0).simple_regret
            out[f"d{d}/gp-ei/after10"] = {
                "gp-ei": float(e[:, 10].mean()),
                "history-only-gp-ei": paired_interval(h[:, 10] - e[:, 10]),
            }
        for t in (3, 6, 10):
            out[f"d{d}/after{t}"] = {
                "history-only": float(h[:, t].mean()),
                "random": float(r[:, t].mean()),
                "diff": paired_interval(h[:, t] - r[:, t]),
            }
    out["beats_random"] = all(out[f"d{d}/after10"]["diff"][2] < 0 for d in (1, 2))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--label", required=True)
    p.add_argument("--checkpoint", default=None, help="evaluate this model instead of training")
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--device", default=None)
    p.add_argument("--save", default=None, help="write the pretrained model here")
    p.add_argument("--gp", action="store_true", help="also run GP-EI on the same tasks")
    args = p.parse_args()
    record: dict = {}
    if args.checkpoint:
        model = load(args.checkpoint)
        record["checkpoint"] = args.checkpoint
    else:
        cfg = ModelConfig(max_dim=2, n_sources=0, d_model=args.d_model, d_ff=2 * args.d_model)
        every = max(1, args.steps // 20)

        def report(step, loss):
            if step % every == 0:
                print(f"step {step} loss {loss:.3f}", flush=True)

        model, stats = pretrain(
            cfg,
            steps=args.steps,
            batch_size=args.batch,
            n_points=30,
            lr=2e-3,
            seed=0,
            callback=report,
            device=args.device,
        )
        record["pretrain"] = {
            "steps": args.steps,
            "batch": args.batch,
            "d_model": args.d_model,
            **stats,
        }
        print(record["pretrain"], flush=True)
        if args.save:
            save(model, args.save)
    t0 = time.perf_counter()
    record |= evaluate_against_random(model.cpu(), gp=args.gp)
    record["eval_seconds"] = time.perf_counter() - t0
    for k, v in record.items():
        print(k, v, flush=True)
    table = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    table[args.label] = record
    RESULTS.write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
