"""Bias and interval coverage of the tail-index estimators with their default k = sqrt(n).

Monte-Carlo on symmetric alpha-stable noise with alpha = 1.7, whose tail is Pareto only to
first order (P(|X| > x) = c x^-a (1 + O(x^-a))), so the top sqrt(n) order statistics carry a
bias that shrinks slowly with n: 200 samples each at n = 2,000 and 20,000, 60 at 200,000.
The README's sample-size advice quotes this run (JSON: ``results/hill_bias.json``).

Usage: ``uv run python packages/heavytail-sgd/benchmarks/hill_bias.py OUT.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from heavytail_sgd.noise import SymmetricAlphaStable
from heavytail_sgd.tail import hill, moment_estimator

ALPHA = 1.7
SIZES = {2000: 200, 20000: 200, 200000: 60}  # n -> Monte-Carlo samples


def one(estimator, n: int, reps: int) -> dict:
    g = torch.Generator().manual_seed(n)
    est, covered = [], 0
    for _ in range(reps):
        e = estimator(SymmetricAlphaStable(ALPHA).sample(n, generator=g))
        est.append(e.alpha)
        covered += e.ci_low <= ALPHA <= e.ci_high
    mean = sum(est) / reps
    sd = (sum((v - mean) ** 2 for v in est) / (reps - 1)) ** 0.5
    return {"bias": mean - ALPHA, "se_of_bias": sd / reps**0.5, "coverage": covered / reps}


def main(out: Path) -> None:
    torch.set_num_threads(1)
    res = {}
    for n, reps in SIZES.items():
        for name, fn in (("hill", hill), ("moment", moment_estimator)):
            row = {**one(fn, n, reps), "reps": reps}
            res[f"{name} n={n}"] = row
            print(name, n, {k: round(v, 3) for k, v in row.items()}, flush=True)
    out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
