"""Where the time of the fixed-rank IMuon step goes, against torch.optim.Muon's Newton-Schulz.

Times (process CPU time, one thread, minimum over the timed steps) of the pieces of
``IMuon._step_fixed_rank`` with the default options (Nesterov, horizontal lift, spectral norm,
``polar="auto"``), re-run one by one on a LoRA pair (A, B) of an m x m product at rank r; the
five bf16 Newton-Schulz iterations Muon runs on each factor; the GEMM throughput per dtype of
the thin shapes involved; and candidate frame computations (Householder QR vs Cholesky-QR
variants) for one factor. The pieces mirror the optimizer's code; a change there must be
mirrored here. ``imuon.lmo.cholesky_qr64`` (a certified float64 Cholesky-QR, not used by the
optimizer) is timed with the frame variants.

    python packages/imuon/benchmarks/fixed_rank_pieces.py --rank 64 \
        --out packages/imuon/benchmarks/results/fixed_rank_pieces_r64.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch
from torch.optim._muon import _zeropower_via_newtonschulz

from imuon.lmo import cholesky_qr64, fixed_rank_frames
from imuon.lmo import rsolve_triangular as rs
from imuon.norms import block_lmo

MUON_ABC = (3.4445, -4.7750, 2.0315)


def _cpu_min(fn, steps: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    best = math.inf
    for _ in range(steps):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


class _Ticks:
    """``with ticks("name"): ...`` adds the block's process CPU time to ``name``."""

    def __init__(self):
        self.t: dict[str, list[float]] = {}
        self.name = ""

    def __call__(self, name: str):
        self.name = name
        return self

    def __enter__(self):
        self.t0 = time.process_time()

    def __exit__(self, *exc):
        self.t.setdefault(self.name, []).append(time.process_time() - self.t0)


def step_pieces(m: int, r: int, steps: int) -> dict[str, float]:
    g = torch.Generator().manual_seed(0)
    A, B = torch.randn(m, r, generator=g), torch.randn(m, r, generator=g)
    ga, gb = 0.01 * torch.randn(m, r, generator=g), 0.01 * torch.randn(m, r, generator=g)
    buf_a, buf_b = 0.01 * torch.randn(m, r, generator=g), 0.01 * torch.randn(m, r, generator=g)
    beta, s2 = 0.95, math.sqrt(2.0)
    tick = _Ticks()
    for _ in range(steps + 3):
        with tick("non-finite check"):
            bool(torch.isfinite(torch.stack([ga.sum(), gb.sum()]).sum()))
        with tick("frames: Householder QR of A and B"):
            qa, ra, qb, rb = fixed_rank_frames((A, B))
        with tick("gradient lift (2 solves)"):
            g_a, g_b = rs(rb, ga, True), rs(ra, gb, True)
        with tick("momentum lift (2 products) + average"):
            raw_a = (buf_a @ rb.mT).lerp_(g_a, 1 - beta)
            raw_b = (buf_b @ ra.mT).lerp_(g_b, 1 - beta)
        with tick("Q^T raw (2 products)"):
            ka, kb = qa.mT @ raw_a, qb.mT @ raw_b
            k = 0.5 * (ka + kb.mT)
        with tick("horizontal momentum (2 products)"):
            m_a, m_b = (qa @ (k - ka)).add_(raw_a), (qb @ (k.mT - kb)).add_(raw_b)
        with tick("Nesterov average"):
            d_a, d_b = g_a.lerp_(raw_a, beta), g_b.lerp_(raw_b, beta)
        with tick("Q^T d (2 products)"):
            kda, kdb = qa.mT @ d_a, qb.mT @ d_b
            kd = 0.5 * (kda + kdb.mT)
        with tick("complements (2 products)"):
            blocks = [s2 * kd, (qa @ -kda).add_(d_a), (qb @ -kdb).add_(d_b)]
        with tick("buffer store (2 solves)"):
            rs(rb.mT, m_a, False, out=buf_a)
            rs(ra.mT, m_b, False, out=buf_b)
        with tick("polar of the blocks"):
            d0, da, db = block_lmo(blocks, "spectral", "auto")
        with tick("back to eta (4 products)"):
            ea = (qa @ (d0 / s2 - qa.mT @ da)).add_(da)
            eb = (qb @ (d0.mT / s2 - qb.mT @ db)).add_(db)
        with tick("xi (2 solves)"):
            xa, xb = rs(rb.mT, ea, False), rs(ra.mT, eb, False)
        with tick("update (in place)"):
            A.add_(xa, alpha=1e-6)
            B.add_(xb, alpha=1e-6)
        with tick("Muon: Newton-Schulz on A and B"):
            _zeropower_via_newtonschulz(ga, MUON_ABC, 5, 1e-7)
            _zeropower_via_newtonschulz(gb, MUON_ABC, 5, 1e-7)
    out = {k: min(v[3:]) for k, v in tick.t.items()}
    out["iMuon pieces, total"] = sum(v for k, v in out.items() if not k.startswith("Muon"))
    return out


def gemm_rates(m: int, r: int, steps: int) -> dict[str, dict[str, float]]:
    f = 2.0 * m * r * r
    rates = {}
    for dt in (torch.bfloat16, torch.float32, torch.float64):
        X, K, Q = (
            torch.randn(r, m, dtype=dt),
            torch.randn(r, r, dtype=dt),
            torch.randn(m, r, dtype=dt),
        )
        rates[str(dt)] = {
            "X X^T (r x r)": f / _cpu_min(lambda X=X: X @ X.mT, steps) / 1e9,
            "K X (r x m)": f / _cpu_min(lambda K=K, X=X: K @ X, steps) / 1e9,
            "Q K (m x r)": f / _cpu_min(lambda Q=Q, K=K: Q @ K, steps) / 1e9,
        }
    return rates


def frames(m: int, r: int, steps: int) -> dict[str, float]:
    A = torch.randn(m, r, generator=torch.Generator().manual_seed(1))

    def chol_qr64(x):
        x = x.double()
        R = torch.linalg.cholesky(x.mT @ x, upper=True)
        return rs(R, x, True), R

    def chol_qr2_64(x):
        q, r1 = chol_qr64(x)
        q2, r2 = chol_qr64(q)
        return q2, r2 @ r1

    def gram64_solve32(x):
        x64 = x.double()
        R = torch.linalg.cholesky(x64.mT @ x64, upper=True).float()
        return rs(R, x, True), R

    return {
        "torch.linalg.qr (float32 Householder)": _cpu_min(lambda: torch.linalg.qr(A), steps),
        "imuon.lmo.cholesky_qr64 (certified; None if not)": _cpu_min(
            lambda: cholesky_qr64(A), steps
        ),
        "Cholesky-QR2, float64": _cpu_min(lambda: chol_qr2_64(A), steps),
        "Cholesky-QR, float64": _cpu_min(lambda: chol_qr64(A), steps),
        "float64 Gram + Cholesky, float32 solve": _cpu_min(lambda: gram64_solve32(A), steps),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="1024 x 1024 product, rank 32, 10 steps")
    ap.add_argument("--device", default="cpu", help="CPU only (process CPU time)")
    ap.add_argument("--out", default="fixed_rank_pieces.json")
    args = ap.parse_args(argv)
    if args.device != "cpu":
        raise SystemExit("fixed_rank_pieces.py measures process CPU time: --device cpu only")
    if args.quick:
        args.size, args.rank, args.steps = 1024, 32, 10
    torch.set_num_threads(1)
    m, r = args.size, args.rank
    res = {
        "command": "python packages/imuon/benchmarks/fixed_rank_pieces.py "
        f"--rank {r} --size {m} --steps {args.steps}",
        "unit": "seconds of process CPU time (minimum over steps), one thread",
        "load_avg_1min_at_start": os.getloadavg()[0],
        "step_pieces": step_pieces(m, r, args.steps),
        "gemm_gflops": gemm_rates(m, r, args.steps),
        "frames_one_factor": frames(m, r, args.steps),
    }
    res["load_avg_1min_at_end"] = os.getloadavg()[0]
    for k, v in res["step_pieces"].items():
        print(f"{k:40s} {v * 1e3:8.3f} ms")
    for k, v in res["frames_one_factor"].items():
        print(f"{k:40s} {v * 1e3:8.3f} ms")
    for k, v in res["gemm_gflops"].items():
        print(k, {n: round(x) for n, x in v.items()})
    with open(args.out, "w") as fh:
        json.dump(res, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
