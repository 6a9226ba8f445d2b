"""Cost of one RGN iteration and one RGD iteration against one ALS sweep, rank-one sensing.

Setting (issue 24): ``n = 50``, ``d = 3``, ``m = 5000`` rank-one Gaussian sensing tensors
stored as factors (``--quick``: ``n = 30``, ``m = 2000``), float64, one thread, at a point
near the planted tensor. Ratios measured side by side with ``shared_core.bench.compare``:

* ``rgn_exact_vs_als_sweep``: Jacobian (``m x dim``) + QR least squares + HOSVD retraction,
  against one ALS sweep (``d`` mode matrices + ``d`` least squares ``m x n``);
* ``rgn_normal_vs_als_sweep``: the same with Cholesky of the normal equations (the default
  solver when ``m >= 4 dim``);
* ``rgn_cg_vs_als_sweep``: the same RGN step with matrix-free CG (tolerance 1e-10);
* ``rgd_vs_als_sweep``: gradient, exact tangent step, retraction, new residual;
* ``rgn_vs_als_to_1e-6`` and ``rgn_vs_factor_gd_to_1e-6``: whole runs from the same start
  (relative error 0.05) until the relative error is below 1e-6 (noiseless).

Memory: the operator holds ``m * sum(n_k)`` numbers (recorded in the JSON beside the
``m * n^d`` a dense operator would need); no step forms an ``n^d`` array (tested at
1000 x 1000 x 1000 in ``tests/test_operators.py``).

Usage: ``uv run python packages/segre/benchmarks/bench_iteration.py [--quick] --out F``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from segre import RecoveryProblem, random_rank_one, rank_one_sensing, solve
from segre.algorithms import _scale, gn_direction, tangent_dot
from shared_core.bench import compare, markdown_table, write_json
from shared_core.manifolds import SegreTangent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="n = 30, m = 2000, fewer repeats")
    ap.add_argument("--out", type=Path, default=Path("bench_iteration.json"))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    n, m = (30, 2000) if args.quick else (50, 5000)
    repeats = 5 if args.quick else 10
    dims = (n, n, n)
    g = torch.Generator().manual_seed(0)
    x_true = random_rank_one(dims, generator=g)
    op = rank_one_sensing(dims, m, generator=g)
    prob = RecoveryProblem(op, op.forward(x_true.scale, x_true.factors))
    man = prob.manifold
    xi = man.random_tangent(x_true, generator=g)
    c = 0.05 / float(tangent_dot(xi, xi).sqrt())
    x = man.retr(x_true, SegreTangent(c * xi.scale, tuple(c * w for w in xi.vecs)))

    def rgn_step(solver):
        r = prob.residual(x)
        step = gn_direction(prob, x, r, solver=solver, cg_tol=1e-10)
        return prob.residual(man.retr(x, step))

    def rgd_step():
        r = prob.residual(x)
        grad = prob.rgrad(x, r)
        ag = prob.apply(x, grad)
        alpha = float(tangent_dot(grad, grad)) / float(ag @ ag)
        return prob.residual(man.retr(x, _scale(-alpha, grad)))

    def als_sweep():
        facs = list(x.factors)
        for k in range(len(facs)):
            v = torch.linalg.lstsq(op.mode_matrix(facs, k), prob.y[:, None]).solution[:, 0]
            facs[k] = v / v.norm()
        return facs

    params = {
        "n": n,
        "d": 3,
        "m": m,
        "dtype": "float64",
        "threads": args.threads,
        "operator_numbers": m * 3 * n,
        "dense_operator_numbers": m * n**3,
    }
    kw = {"warmup": 1, "repeats": repeats, "threads": args.threads, "params": params}
    results = [
        compare(lambda: rgn_step("exact"), als_sweep, name=f"rgn_exact_vs_als_sweep_n{n}", **kw),
        compare(lambda: rgn_step("normal"), als_sweep, name=f"rgn_normal_vs_als_sweep_n{n}", **kw),
        compare(lambda: rgn_step("cg"), als_sweep, name=f"rgn_cg_vs_als_sweep_n{n}", **kw),
        compare(rgd_step, als_sweep, name=f"rgd_vs_als_sweep_n{n}", **kw),
    ]

    def run_to(method):
        def go():
            tr = solve(prob, method, x, max_iter=2000, x_true=x_true, stop_error=1e-6)
            assert tr.errors[-1] < 1e-6, (method, tr.errors[-1])

        return go

    kw_runs = {**kw, "repeats": max(3, repeats // 2)}
    results += [
        compare(run_to("rgn"), run_to("als"), name=f"rgn_vs_als_to_1e-6_n{n}", **kw_runs),
        compare(
            run_to("rgn"), run_to("factor-gd"), name=f"rgn_vs_factor_gd_to_1e-6_n{n}", **kw_runs
        ),
    ]
    write_json(args.out, results)
    print(markdown_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
