"""Shipped quick history-only model vs random search on fresh prior tasks (d = 1, 2).

Cited by the README (pretraining budget). Run from the repository root:

    python packages/ficbo/scripts/history_only_vs_random.py
"""

import json
from pathlib import Path

import torch

from ficbo.experiments.synthetic import paired_interval
from ficbo.model import pretrained
from ficbo.optimize import model_policy, random_policy, run
from ficbo.prior import evaluate, sample_tasks

out = {}
for d in (1, 2):
    g = torch.Generator().manual_seed(50_000 + d)
    n = 256
    tasks = sample_tasks(n, d, 0, generator=g)
    x = torch.rand(n, 30, d, generator=g, dtype=torch.float64)
    f, fb = evaluate(tasks, x, generator=g)
    h = run(
        x, f, fb, model_policy(pretrained("quick-history-only")), n_iter=10, seed=0
    ).simple_regret
    r = run(x, f, fb, random_policy, n_iter=10, seed=0).simple_regret
    for t in (3, 6, 10):
        m = paired_interval(h[:, t] - r[:, t])
        out[f"d{d}/after{t}"] = {
            "history-only": float(h[:, t].mean()),
            "random": float(r[:, t].mean()),
            "diff": m,
        }
        print(
            d,
            t,
            round(float(h[:, t].mean()), 3),
            round(float(r[:, t].mean()), 3),
            [round(v, 3) for v in m],
            flush=True,
        )
Path("packages/ficbo/docs/results/history_only_vs_random.json").write_text(
    json.dumps(out, indent=1)
)
