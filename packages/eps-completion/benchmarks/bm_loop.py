"""The fused solver loops (NumPy/SciPy) against the reference torch loops, side by side.

Cases (each: the same problem, the same start, a fixed number of iterations unless noted,
so the ratio is the ratio of per-iteration costs; the iteration counts of both sides are
stored and checked equal):

* ``bm n=30``: the hard-regimes size (30 x 30, r = 2, ρ = 1.7 → p = 0.22), ε = 0.1,
  300 iterations (the dense route);
* ``bm 400x64``: the real experiment's size (r = 4, p = 0.3), ε = 0.1, 300 iterations;
* ``bm n=N``: N x N, r = 5, p = 0.1 (the issue's benchmark problem; N = 2000, quick 500),
  ε = 0.1, 10 iterations (the sparse route);
* ``rgd n=N``: one full ε-RGD solve of the time-to-accuracy benchmark (ε = 1e-4,
  spectral start, gtol 1e-9), fused Ω-products vs the torch ones.

Both sides run single-threaded: ``compare(threads=1)`` pins torch, and OpenBLAS (NumPy's
BLAS) is pinned here through ``OPENBLAS_NUM_THREADS=1`` before NumPy loads.

    python packages/eps-completion/benchmarks/bm_loop.py \
        --out packages/eps-completion/benchmarks/results/bm_loop.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse

import torch

from eps_completion import bm_gd, low_rank_matrix, observe, random_mask, rgd
from shared_core.bench import compare, markdown_table, write_json


def _problem(m, n, r, p, seed=0):
    g = torch.Generator().manual_seed(seed)
    mat = low_rank_matrix(m, n, r, g)
    return mat, observe(mat, random_mask((m, n), p, g))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="bm_loop.json")
    args = ap.parse_args(argv)
    big = 500 if args.quick else 2000
    repeats = 3 if args.quick else 5
    cases = [
        ("bm n=30", 30, 30, 2, 1.7 * 2 * 58 / 900, 300),
        ("bm 400x64", 400, 64, 4, 0.3, 300),
        (f"bm n={big}", big, big, 5, 0.1, 10),
    ]
    results = []
    for name, m, n, r, p, iters in cases:
        _mat, obs = _problem(m, n, r, p)
        g = torch.Generator().manual_seed(1)
        start = (
            torch.randn(m, r, generator=g, dtype=torch.float64) * 1e-3,
            torch.randn(n, r, generator=g, dtype=torch.float64) * 1e-3,
        )
        counts: dict[str, list[int]] = {"fused": [], "torch": []}

        def run(backend, obs=obs, r=r, iters=iters, start=start, counts=counts):
            res = bm_gd(obs, r, 0.1, init=start, max_iter=iters, gtol=0.0, backend=backend)
            counts[backend].append(res.n_iter)

        res = compare(
            lambda run=run: run("fused"),
            lambda run=run: run("torch"),
            name=name,
            warmup=1,
            repeats=repeats,
            threads=1,
            params={"m": m, "n": n, "r": r, "p": round(p, 4), "eps": 0.1, "iterations": iters},
        )
        res.params["n_iter_fused"], res.params["n_iter_torch"] = counts["fused"], counts["torch"]
        if set(counts["fused"]) != set(counts["torch"]):
            raise RuntimeError(f"{name}: iteration counts differ {counts}")
        results.append(res)
    mat, obs = _problem(big, big, 5, 0.1)
    errs: dict[str, list[float]] = {"fused": [], "torch": []}

    def solve(backend):
        x = rgd(obs, 5, 1e-4, gtol=1e-9, backend=backend).matrix()
        errs[backend].append(float((x - mat).norm() / mat.norm()))

    res = compare(
        lambda: solve("fused"),
        lambda: solve("torch"),
        name=f"rgd n={big}",
        warmup=0,
        repeats=3,
        threads=1,
        params={"n": big, "r": 5, "p": 0.1, "eps": 1e-4, "gtol": 1e-9},
    )
    res.params["final_rel_errors_fused"], res.params["final_rel_errors_torch"] = (
        errs["fused"],
        errs["torch"],
    )
    results.append(res)
    print(markdown_table(results))
    cmd = "python packages/eps-completion/benchmarks/bm_loop.py" + (
        " --quick" if args.quick else ""
    )
    write_json(args.out, results, command=cmd, load_average=os.getloadavg()[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
