"""Decision time per query: FICBO (one forward pass + EI) vs GP-EI from BoTorch.

One task in d = 2, a history of ``H`` points and a pool of ``N`` candidates with one feedback
source. Candidate: the shipped quick FICBO model's policy (one forward pass, EI, argmax).
Baseline: BoTorch GP-EI (``SingleTaskGP`` fitted by marginal likelihood, log-EI over the
pool). Both measured side by side by ``shared_core.bench.compare`` on one thread; the ratio is
candidate time / baseline time (< 1: FICBO decides faster).

    python packages/ficbo/benchmarks/decision_time.py --quick \\
        --out packages/ficbo/benchmarks/results/decision_time_cpu_quick.json

``--device cuda`` puts the FICBO model on a GPU (its policy returns to the CPU, so each timed
call includes the transfer and the synchronisation); GP-EI stays on the CPU.
"""

from __future__ import annotations

import argparse

import torch

from ficbo.baselines import gp_ei_policy
from ficbo.model import pretrained
from ficbo.optimize import PoolState, model_policy
from ficbo.prior import evaluate, sample_tasks, standardize_feedback
from shared_core.bench import compare, markdown_table, write_json


def _state(h: int, n: int, seed: int = 0) -> PoolState:
    g = torch.Generator().manual_seed(seed)
    tasks = sample_tasks(1, 2, 1, generator=g, rho=0.9)
    x = torch.rand(1, n, 2, generator=g, dtype=torch.float64)
    f, fb = evaluate(tasks, x, generator=g)
    idx = torch.randperm(n, generator=g)[:h][None]
    queried = torch.zeros(1, n, dtype=torch.bool)
    queried[0, idx[0]] = True
    return PoolState(
        x_pool=x,
        fb_pool=standardize_feedback(fb),
        hist_idx=idx,
        y_hist=f[:, idx[0]],
        queried=queried,
        generator=g,
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--out", default=None, help="JSON file to write")
    p.add_argument("--device", default=None, help="where the FICBO model runs (default cpu)")
    args = p.parse_args(argv)
    repeats = 3 if args.quick else 10
    fic = model_policy(pretrained("quick-ficbo", device=args.device))
    gp = gp_ei_policy()
    results = []
    for h, n in ((10, 100), (50, 200)):
        state = _state(h, n)
        results.append(
            compare(
                lambda state=state: fic(state),
                lambda state=state: gp(state),
                name=f"decision H={h} N={n}",
                warmup=1,
                repeats=repeats,
                threads=1,
                params={"history": h, "pool": n, "dim": 2, "device": args.device or "cpu"},
            )
        )
    print(markdown_table(results))
    if args.out:
        write_json(args.out, results, command="python packages/ficbo/benchmarks/decision_time.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
