"""Thin-QR frames for the fixed-rank step: ``torch.linalg.qr`` vs Cholesky-QR variants.

The fixed-rank LMO needs, per factor, an orthonormal frame ``Q`` and a triangular ``R`` with
``A = Q R`` (``imuon.lmo.fixed_rank_frames``). Candidates:

- ``qr``: ``torch.linalg.qr`` (Householder: LAPACK geqrf + orgqr), the current choice;
- ``cholqr``: ``R = chol(A^T A)``, ``Q = A R^{-1}`` (one Gram product, one r x r Cholesky, one
  triangular solve); loses orthogonality like ``cond(A)^2 * eps`` and breaks down (Cholesky of
  a numerically singular Gram) once ``cond(A)^2 * eps >~ 1``;
- ``cholqr2``: ``cholqr`` applied twice (``R = R_2 R_1``): orthogonal to ``eps`` as long as the
  first pass does not break down (``cond(A) <~ eps^{-1/2}``: ~4e3 in float32, ~7e7 in float64);
- ``scholqr3``: shifted Cholesky-QR then ``cholqr2`` (a shift ``s ~ m r eps ||A||^2`` on the
  first Gram keeps the Cholesky alive up to ``cond(A) ~ eps^{-1}``).

Speed: 1 CPU thread, interleaved pairs against ``qr`` (``shared_core.bench.compare``), float32
tall-skinny factors of the LoRA shapes. Accuracy: factors ``A M`` with ``cond(M)`` in
{1, 1e2, 1e4, 1e6} (the gauge range of the invariance tests), float32 and float64; reported:
orthogonality ``||Q^T Q - I||_F``, residual ``||A - QR||_F / ||A||_F``, and the relative error of
one fixed-rank iMuon step's product ``(A + t xi_A)(B + t xi_B)^T`` against a float64 reference
computed with ``torch.linalg.qr`` (what the optimizer actually consumes); ``nan`` marks a
breakdown.

    python packages/imuon/benchmarks/frames.py --quick \
        --out packages/imuon/benchmarks/results/frames_cpu_quick.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import torch

from imuon.lmo import fixed_rank_lmo, fixed_rank_rgrad
from shared_core.bench import compare, write_json
from shared_core.manifolds import Factors

THREADS = 1


def qr(a):
    return torch.linalg.qr(a)


def _chol(a, shift: float = 0.0):
    g = a.mT @ a
    if shift:
        g = g + shift * torch.eye(g.shape[-1], dtype=g.dtype, device=g.device)
    r, info = torch.linalg.cholesky_ex(g, upper=True)
    if int(info) != 0:
        nan = torch.full_like(a, math.nan)
        return nan, torch.full_like(g, math.nan)
    return torch.linalg.solve_triangular(r, a, upper=True, left=False), r


def cholqr(a):
    return _chol(a)


def cholqr2(a):
    q, r1 = _chol(a)
    q, r2 = _chol(q)
    return q, r2 @ r1


def scholqr3(a):
    m, n = a.shape
    eps = torch.finfo(a.dtype).eps
    shift = 11 * (m * n + n * (n + 1)) * eps * float(torch.linalg.matrix_norm(a, 2)) ** 2
    q, r1 = _chol(a, shift)
    q, r2 = _chol(q)
    q, r3 = _chol(q)
    return q, r3 @ r2 @ r1


METHODS = {"qr": qr, "cholqr": cholqr, "cholqr2": cholqr2, "scholqr3": scholqr3}


def _conditioned(r, cond, gen, dtype):
    u = torch.linalg.qr(torch.randn(r, r, generator=gen, dtype=torch.float64))[0]
    v = torch.linalg.qr(torch.randn(r, r, generator=gen, dtype=torch.float64))[0]
    s = torch.logspace(0.5 * math.log10(cond), -0.5 * math.log10(cond), r, dtype=torch.float64)
    return (u @ torch.diag(s) @ v.mT).to(dtype)


def _frames_with(method, x):
    qa, ra = METHODS[method](x[0])
    qb, rb = METHODS[method](x[1])
    return qa, ra, qb, rb


def step_product(x, G, method, t=0.1):
    """Product after one spectral fixed-rank step with frames from ``method``."""
    frames = _frames_with(method, x)
    rg = fixed_rank_rgrad(x, (G @ x.B, G.mT @ x.A), frames)
    xi = fixed_rank_lmo(x, rg, "spectral", polar="svd", frames=frames)
    return (x.A + t * xi.A) @ (x.B + t * xi.B).mT


def accuracy(m, n, r, conds, seed=0):
    gen = torch.Generator().manual_seed(seed)
    a0 = torch.randn(m, r, generator=gen, dtype=torch.float64)
    b0 = torch.randn(n, r, generator=gen, dtype=torch.float64)
    G = torch.randn(m, n, generator=gen, dtype=torch.float64) / math.sqrt(m * n)
    ref = step_product(Factors(a0, b0), G, "qr")  # float64, gauge-free reference
    rows = []
    for cond in conds:
        M = _conditioned(r, cond, gen, torch.float64)
        a64, b64 = a0 @ M, torch.linalg.solve(M, b0.mT).mT
        for dtype in (torch.float32, torch.float64):
            a, b = a64.to(dtype), b64.to(dtype)
            for meth in METHODS:
                q, rr = METHODS[meth](a)
                eye = torch.eye(r, dtype=dtype)
                fr = _frames_with(meth, Factors(a, b))
                if all(bool(torch.isfinite(f).all()) for f in fr):
                    prod = step_product(Factors(a, b), G.to(dtype), meth).double()
                else:  # breakdown: the Cholesky of the Gram matrix failed
                    prod = torch.full_like(ref, math.nan)
                rows.append(
                    {
                        "cond_M": cond,
                        "dtype": str(dtype).removeprefix("torch."),
                        "method": meth,
                        "orthogonality": float((q.mT @ q - eye).norm()),
                        "residual": float((a - q @ rr).norm() / a.norm()),
                        "step_rel_err": float((prod - ref).norm() / ref.norm()),
                    }
                )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cpu", help="where the timings run (accuracy: CPU)")
    ap.add_argument("--out", default="frames.json")
    args = ap.parse_args(argv)
    dev = args.device
    torch.manual_seed(0)
    reps = 20 if args.quick else 50
    shapes = [(1024, 8), (1024, 32), (4096, 8), (4096, 64)]
    timings = []
    for m, r in shapes:
        a = torch.randn(m, r, device=dev)
        for meth in ("cholqr", "cholqr2", "scholqr3"):
            fn = METHODS[meth]
            res = compare(
                lambda fn=fn, a=a: fn(a),
                lambda a=a: qr(a),
                name=f"{meth} vs torch.linalg.qr, float32 {m}x{r}",
                repeats=reps,
                warmup=3,
                device=dev,
                threads=THREADS,
                params={"m": m, "r": r, "candidate": meth, "baseline": "qr"},
            )
            timings.append(res)
            spread = f"[{res.ratio_min:.3f}, {res.ratio_max:.3f}]"
            print(f"{res.name:50s} ratio {res.ratio_median:.3f} {spread}")
    conds = [1.0, 1e2, 1e4, 1e6]
    acc = accuracy(*((300, 200, 8) if args.quick else (1024, 768, 16)), conds)
    print(f"{'cond':>6} {'dtype':8} {'method':9} {'orth':>9} {'resid':>9} {'step err':>9}")
    for row in acc:
        print(
            f"{row['cond_M']:6.0e} {row['dtype']:8} {row['method']:9} {row['orthogonality']:9.2e} "
            f"{row['residual']:9.2e} {row['step_rel_err']:9.2e}"
        )
    write_json(args.out, timings, device=dev, command="python " + " ".join(sys.argv))
    with open(args.out) as f:
        doc = json.load(f)
    doc["accuracy"] = acc
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
