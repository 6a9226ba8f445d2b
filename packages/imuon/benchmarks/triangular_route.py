"""The fixed-rank step with R^-1 applied by the float64 inverse (the default for tall factors)
against the same step with triangular solves, interleaved, warm, in one process (issue 34).

Only the route differs (``imuon.optim.use_inverse`` is switched per call), so the ratio
isolates it; the machine is recorded (``shared_core.bench``), since TRSM's speed is what varies
across BLAS builds (on an AMD EPYC with MKL, 1.9x the GEMM at 4096x64; on this package's
Xeon, ~1.25x). Ratios are of process CPU time on a CPU (less sensitive to other jobs on a
shared machine), of wall time with synchronisation on CUDA; median [min, max] over pairs.

    python packages/imuon/benchmarks/triangular_route.py \
        --out packages/imuon/benchmarks/results/triangular_route_cpu.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

import imuon.optim as optim_module
from imuon import IMuon
from shared_core.bench import write_json


def _param(t):
    p = torch.nn.Parameter(t.clone())
    p.grad = torch.randn_like(t) * 0.01
    return p


def _clock(device: str):
    if device.startswith("cuda"):

        def now():
            torch.cuda.synchronize()
            return time.perf_counter()

        return now
    return time.process_time


def measure(m: int, r: int, rounds: int, device: str) -> dict:
    a, b = torch.randn(m, r, device=device), torch.randn(m, r, device=device)
    opts = {
        k: IMuon([{"params": [_param(a), _param(b)], "manifold": "fixed_rank"}], lr=0.01)
        for k in ("inverse", "solve")
    }
    route = optim_module.use_inverse
    now = _clock(device)
    times: dict[str, list[float]] = {"inverse": [], "solve": []}
    try:
        for i in range(rounds + 3):  # 3 warm-up rounds, dropped
            for k in ("inverse", "solve") if i % 2 else ("solve", "inverse"):
                optim_module.use_inverse = route if k == "inverse" else (lambda rows, rank: False)
                t0 = now()
                opts[k].step()
                times[k].append(now() - t0)
    finally:
        optim_module.use_inverse = route
    ratios = sorted(x / y for x, y in zip(times["inverse"][3:], times["solve"][3:], strict=True))
    return {
        "shape": [m, r],
        "ratio_median": statistics.median(ratios),
        "ratio_min": ratios[0],
        "ratio_max": ratios[-1],
        "ms_median_inverse": 1e3 * statistics.median(times["inverse"][3:]),
        "ms_median_solve": 1e3 * statistics.median(times["solve"][3:]),
        "rounds": rounds,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="triangular_route.json")
    ap.add_argument("--quick", action="store_true", help="1024 rows, fewer rounds")
    ap.add_argument("--ranks", default="8,64")
    args = ap.parse_args(argv)
    threads = 1 if args.device == "cpu" else None
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    m = 1024 if args.quick else 4096
    results = []
    for r in (int(x) for x in args.ranks.split(",")):
        res = measure(m, r, 10 if args.quick else (60 if r <= 16 else 30), args.device)
        results.append(res)
        print(
            f"{m}x{r}: inverse/solve {res['ratio_median']:.3f} "
            f"[{res['ratio_min']:.2f}, {res['ratio_max']:.2f}], "
            f"ms {res['ms_median_inverse']:.2f} vs {res['ms_median_solve']:.2f}"
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    # shared_core.bench records the machine (CPU model and flags, BLAS, a GEMM probe)
    write_json(
        args.out,
        results,
        device=args.device,
        command="python " + " ".join(sys.argv),
        threads=threads,
        load_avg_1min_at_end=load,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
