"""Peak memory of rank-one sensing and one RGN iteration, against what a dense operator needs.

For each size a fresh interpreter imports the package, records its resident-set high-water
mark (``ru_maxrss``), then builds ``m`` rank-one sensing tensors stored as factors, measures
the planted tensor, and runs one RGN iteration (Jacobian, Cholesky least squares, HOSVD
retraction) near it. The JSON records the growth of the high-water mark over the post-import
baseline beside ``m * n^d * 8`` bytes, the size of the same operator stored densely (float64).
Linux reports ``ru_maxrss`` in KiB.

Usage: ``uv run python packages/segre/benchmarks/peak_memory.py --out F [--sizes 50 200]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, resource, sys
import torch
torch.set_num_threads(1)
from segre import RecoveryProblem, random_rank_one, rank_one_sensing
from segre.algorithms import gn_direction
from shared_core.manifolds import SegreTangent
n, d, m = (int(v) for v in sys.argv[1:4])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
g = torch.Generator().manual_seed(0)
dims = (n,) * d
x_true = random_rank_one(dims, generator=g)
op = rank_one_sensing(dims, m, generator=g)
prob = RecoveryProblem(op, op.forward(x_true.scale, x_true.factors))
man = prob.manifold
xi = man.random_tangent(x_true, generator=g)
x = man.retr(x_true, SegreTangent(0.01 * xi.scale, tuple(0.01 * w for w in xi.vecs)))
r = prob.residual(x)
x = man.retr(x, gn_direction(prob, x, r, solver="normal"))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"n": n, "d": d, "m": m, "baseline_kib": base, "peak_kib": peak}))
"""


def measure(n: int, d: int, m: int) -> dict:
    out = (
        subprocess.run(
            [sys.executable, "-c", CHILD, str(n), str(d), str(m)],
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    row = json.loads(out)
    row["growth_mib"] = (row["peak_kib"] - row["baseline_kib"]) / 1024
    row["factor_storage_mib"] = m * n * d * 8 / 2**20
    row["dense_operator_gib"] = m * n**d * 8 / 2**30
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("peak_memory.json"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 200])
    ap.add_argument("--m", type=int, default=5000)
    args = ap.parse_args(argv)
    rows = [measure(n, 3, args.m) for n in args.sizes]
    env = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": platform.processor(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows, "environment": env}, indent=2) + "\n")
    for r in rows:
        print(
            f"n={r['n']} d=3 m={r['m']}: peak grew {r['growth_mib']:.1f} MiB "
            f"(factors {r['factor_storage_mib']:.1f} MiB; "
            f"a dense operator {r['dense_operator_gib']:.1f} GiB)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
