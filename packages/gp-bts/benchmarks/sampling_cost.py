"""Time per BTS round: exact joint posterior sampling vs pathwise (Matheron) sampling.

One round of batched TS at Q = 16 on n candidates (2-d, known SE prior, 64 observations,
float64, one thread): ``thompson_batch(..., sampler="exact")`` (posterior covariance of the
candidates and its Cholesky factor, O(n^3)) against ``sampler="pathwise"`` (BoTorch's
``draw_matheron_paths``: random-feature prior draws plus the Matheron update, O(n)). The ratio
pathwise / exact is measured pair by pair in one run (``shared_core.bench.compare``).
``gp_bts.policy.EXACT_MAX_CANDIDATES`` (the automatic switch) is set from these numbers.

    python packages/gp-bts/benchmarks/sampling_cost.py [--quick] [--out PATH]
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch

from gp_bts.models import KernelSpec, build_model
from gp_bts.policy import thompson_batch
from shared_core.bench import compare, markdown_table, write_json

Q = 16


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--full", action="store_true")
    p.add_argument("--out", type=Path, default=Path("reports/bench/gp-bts/sampling_cost.json"))
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    sizes = (500, 1000, 2000, 5000)
    repeats = 3 if args.quick else 7
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, 2, generator=g, dtype=torch.float64)
    y = torch.sin(5 * x[:, :1]) * torch.cos(3 * x[:, 1:])
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    model = build_model(x, y, bounds=bounds, noise_var=1e-2, kernel=KernelSpec("se", 0.15))
    results = []
    for n in sizes:
        cands = torch.rand(n, 2, generator=g, dtype=torch.float64)
        r = compare(
            lambda c=cands: thompson_batch(model, c, Q, sampler="pathwise"),
            lambda c=cands: thompson_batch(model, c, Q, sampler="exact"),
            name=f"pathwise/exact Q={Q} n={n}",
            warmup=1,
            repeats=repeats if n < 5000 else max(2, repeats // 2),
            threads=1,
            params={"Q": Q, "n_candidates": n, "n_train": 64, "dim": 2, "dtype": "float64"},
        )
        results.append(r)
        print(f"n={n}: ratio median {r.ratio_median:.3g}", flush=True)
    write_json(args.out, results, command="python packages/gp-bts/benchmarks/sampling_cost.py")
    print(markdown_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
