"""Accuracy of every Newton-Schulz table of ``shared_core.polar`` against the exact polar factor.

For each test matrix ``G`` (Gaussian 1024x1024, Gaussian 4096x1024, and a 1024x1024 matrix with
singular values 1/i and random orthogonal factors) and each table of
``shared_core.polar.NS_TABLES`` at 5 and 6 steps (and its default step count), this reports

- the relative Frobenius error ``||msign(G) - U V^T||_F / ||U V^T||_F`` against the float64
  SVD reference of the same (dtype-rounded) input, and
- the range (min, max) of the output's singular values (1 for the exact factor),

plus the SVD path itself, and whether the default table (``DEFAULT_TABLE`` at
``DEFAULT_STEPS``) is at or below five-step Polar Express on every matrix (the goal).

The iteration runs in ``--dtype`` (default: float32 on the CPU, bfloat16 on CUDA, where the
Newton-Schulz steps run the Triton SYRK kernels); the committed CPU report is float32, and
bfloat16 figures come from a GPU run (``--device cuda``).

Usage:
    python shared-core/benchmarks/accuracy_polar.py [--quick] [--dtype D] [--device cpu|cuda]
        [--out shared-core/benchmarks/results/accuracy_polar.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from shared_core.bench import write_json
from shared_core.polar import DEFAULT_STEPS, DEFAULT_TABLE, NS_TABLES, msign, table_info

HERE = Path(__file__).resolve().parent
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

#: Figures quoted in the issue (measured by its author; dtype and size not stated).
ANCHORS = {
    "muon": {"gaussian": 0.16, "inv_spectrum": 0.39},
    "polar_express": {"gaussian": 0.10, "inv_spectrum": 0.15},
}


def _orthogonal(n: int, gen: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    # Sign fix so that q is Haar-distributed rather than biased by the QR convention.
    return q * torch.sign(torch.diagonal(r)).unsqueeze(0)


def test_matrices(quick: bool, seed: int) -> dict[str, torch.Tensor]:
    """The three test matrices in float64 (quick: a quarter of each side)."""
    n = 256 if quick else 1024
    gen = torch.Generator().manual_seed(seed)
    s = 1.0 / torch.arange(1, n + 1, dtype=torch.float64)
    return {
        f"gaussian_{n}x{n}": torch.randn(n, n, generator=gen, dtype=torch.float64),
        f"gaussian_{4 * n}x{n}": torch.randn(4 * n, n, generator=gen, dtype=torch.float64),
        f"inv_spectrum_{n}x{n}": (_orthogonal(n, gen) * s) @ _orthogonal(n, gen).T,
    }


def _kind(name: str) -> str:
    return "inv_spectrum" if name.startswith("inv") else "gaussian"


def evaluate(G64: torch.Tensor, dtype: torch.dtype, device: str) -> list[dict]:
    """Error and singular-value range of every table (and the SVD path) on one matrix."""
    G = G64.to(dtype)
    Gd = G.to(device)
    U, _, Vh = torch.linalg.svd(G.to(torch.float64), full_matrices=False)
    ref = U @ Vh
    ref_norm = float(torch.linalg.matrix_norm(ref))
    runs: list[tuple[str, int | None]] = []
    for name in NS_TABLES:
        for steps in sorted({5, 6, table_info(name).default_steps}):
            runs.append((name, steps))
    runs.append(("svd", None))
    rows = []
    for method, steps in runs:
        t0 = time.perf_counter()
        if method == "svd":
            out = msign(Gd, method="svd", dtype=torch.float32)
        else:
            out = msign(Gd, method=method, steps=steps, dtype=dtype)
        seconds = time.perf_counter() - t0
        out64 = out.to("cpu", torch.float64)
        sv = torch.linalg.svdvals(out64)
        rows.append(
            {
                "method": method,
                "steps": steps,
                "default": method == DEFAULT_TABLE and steps == DEFAULT_STEPS,
                "rel_fro_error": float(torch.linalg.matrix_norm(out64 - ref)) / ref_norm,
                "sv_min": float(sv.min()),
                "sv_max": float(sv.max()),
                "seconds": seconds,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="256-sided matrices instead of 1024")
    p.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default=None,
        help="iteration dtype (default: bfloat16 on CUDA, float32 on the CPU)",
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=HERE / "results" / "accuracy_polar.json")
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {args.device} requested but no CUDA device is available")
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    dtype = DTYPES[args.dtype]

    results: list[dict] = []
    for name, G64 in test_matrices(args.quick, args.seed).items():
        for row in evaluate(G64, dtype, args.device):
            results.append({"matrix": name, "shape": list(G64.shape), **row})
            r = results[-1]
            print(
                f"{name:<22} {r['method']:<14} steps={r['steps']!s:<5} "
                f"err={r['rel_fro_error']:.4f} sv=[{r['sv_min']:.3f}, {r['sv_max']:.3f}]",
                flush=True,
            )

    goal = {}
    for name in dict.fromkeys(r["matrix"] for r in results):
        by = {(r["method"], r["steps"]): r["rel_fro_error"] for r in results if r["matrix"] == name}
        d, pe = by[(DEFAULT_TABLE, DEFAULT_STEPS)], by[("polar_express", 5)]
        goal[name] = {"default": d, "polar_express_5": pe, "met": d <= pe}
    met = all(g["met"] for g in goal.values())
    print(f"default {DEFAULT_TABLE}@{DEFAULT_STEPS} at or below polar_express@5 everywhere: {met}")
    write_json(
        args.out,
        results,
        device=args.device,
        command=" ".join(["python", *sys.argv]) if argv is None else " ".join(argv),
        dtype=args.dtype,
        quick=args.quick,
        seed=args.seed,
        default={"table": DEFAULT_TABLE, "steps": DEFAULT_STEPS},
        goal={
            "rule": "default error <= polar_express at 5 steps on every matrix",
            "met": met,
            "per_matrix": goal,
        },
        anchors=ANCHORS,
        note=(
            "Newton-Schulz iterates in the given dtype on the given device; the reference is the "
            "float64 SVD of the same dtype-rounded input. anchors: figures quoted in the issue "
            "(conditions not stated), for orientation only."
        ),
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
