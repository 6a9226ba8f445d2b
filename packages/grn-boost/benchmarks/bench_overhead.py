"""Overhead of the GRN custom objective over the backend's built-in objective, at equal rounds.

Two ratios, each measured side by side in one run with ``shared_core.bench.compare``
(candidate / baseline, median over interleaved pairs):

* ``xgboost_hist``: ``grn_boost.fit(..., backend="xgboost", scheme="grn")`` (the custom
  objective, with the per-round loss, gradient norm, cosine and edge record) against
  ``xgboost.train`` with the built-in ``reg:pseudohubererror``, same trees (``hist``, depth 6,
  ``reg_lambda = 0``, ``min_child_weight = 0``, one thread), same rounds, same start;
* ``lightgbm``: the same against ``lightgbm.train`` with the built-in ``huber`` objective
  (Huber, not pseudo-Huber: the closest built-in; the trees cost the same).

Both sides build their data matrix inside the timed call. ``n = 100_000`` rows, 10 features.

Usage: ``uv run python packages/grn-boost/benchmarks/bench_overhead.py [--quick] --out F``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import lightgbm as lgb
import numpy as np
import xgboost as xgb

from grn_boost import fit
from shared_core.bench import compare, markdown_table, write_json


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="10 rounds, 3 repeats")
    ap.add_argument("--out", type=Path, default=Path("bench_overhead.json"))
    args = ap.parse_args(argv)
    n, d = 100_000, 10
    rounds, repeats = (10, 3) if args.quick else (30, 5)
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(n, d))
    y = 10 * np.sin(6 * X[:, 0]) + X[:, 1] * X[:, 2] * 5 + rng.normal(size=n)
    base = float(np.median(y))
    depth, lr = 6, 0.3
    params = {"n": n, "d": d, "rounds": rounds, "max_depth": depth, "threads": 1}

    def grn_xgb():
        return fit(
            X,
            y,
            "pseudo_huber",
            backend="xgboost",
            rounds=rounds,
            learning_rate=lr,
            max_depth=depth,
            base_score=base,
        )

    def builtin_xgb():
        p = {
            "objective": "reg:pseudohubererror",
            "eta": lr,
            "max_depth": depth,
            "lambda": 0.0,
            "min_child_weight": 0.0,
            "tree_method": "hist",
            "base_score": base,
            "nthread": 1,
            "verbosity": 0,
        }
        return xgb.train(p, xgb.DMatrix(X, label=y), rounds)

    def grn_lgb():
        return fit(
            X,
            y,
            "pseudo_huber",
            backend="lightgbm",
            rounds=rounds,
            learning_rate=lr,
            max_depth=depth,
            base_score=base,
        )

    def builtin_lgb():
        p = {
            "objective": "huber",
            "alpha": 1.0,
            "learning_rate": lr,
            "max_depth": depth,
            "num_leaves": 2**depth,
            "lambda_l2": 0.0,
            "min_sum_hessian_in_leaf": 1e-9,
            "min_data_in_leaf": 20,
            "boost_from_average": False,
            "num_threads": 1,
            "verbose": -1,
        }
        ds = lgb.Dataset(X, label=y, init_score=np.full(n, base), params={"verbose": -1})
        return lgb.train(p, ds, rounds)

    results = [
        compare(
            grn_xgb,
            builtin_xgb,
            name=f"xgboost_hist_n{n}_r{rounds}",
            warmup=1,
            repeats=repeats,
            threads=1,
            params=params,
        ),
        compare(
            grn_lgb,
            builtin_lgb,
            name=f"lightgbm_n{n}_r{rounds}",
            warmup=1,
            repeats=repeats,
            threads=1,
            params=params,
        ),
    ]
    cmd = "python packages/grn-boost/benchmarks/bench_overhead.py" + (
        " --quick" if args.quick else ""
    )
    write_json(args.out, results, command=cmd)
    print(markdown_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
