"""Speed of ``shared_core.polar.msign`` against the Newton-Schulz inside ``torch.optim.Muon``.

Side by side, interleaved, in one run (``shared_core.bench.compare``), at 1024x1024, 4096x1024
and 4096x4096 (8192x8192 added on CUDA):

- ``ns``: ``msign(G, DEFAULT_TABLE, steps, dtype)`` against
  ``torch.optim._muon._zeropower_via_newtonschulz(G, Muon's coefficients, steps, eps)``: the
  same number of quintic steps in the same dtype, so the ratio is the cost of the
  implementation (on the CPU both run the same addmm sequence; on CUDA msign runs the Triton
  SYRK kernels of ``shared_core.kernels.ns_step``).
- ``svd``: the exact ``msign(G, "svd")`` (float32 SVD) against the same baseline.

Ratios are candidate time / baseline time, per interleaved pair (< 1: msign is faster).

Muon's function always iterates in bfloat16 (it casts its input). For ``--dtype`` other than
bfloat16 the baseline is called under a ``TorchFunctionMode`` that turns that one bfloat16 cast
into a cast to the requested dtype, so torch's own code runs unchanged, in that dtype. The
mode adds a Python dispatch to each of the baseline's ~17 torch calls (microseconds against
tens of milliseconds), so it can only favour msign by that much.

Usage:
    python shared-core/benchmarks/speed_polar.py [--quick] [--device cpu|cuda]
        [--dtype float32|bfloat16] [--steps 5] [--out shared-core/benchmarks/results/...]
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import torch
from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C, EPS, _zeropower_via_newtonschulz
from torch.overrides import TorchFunctionMode

from shared_core.bench import compare, markdown_table, write_json
from shared_core.polar import DEFAULT_TABLE, msign

HERE = Path(__file__).resolve().parent
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class _CastBF16To(TorchFunctionMode):
    """Redirect ``tensor.to(dtype=torch.bfloat16, ...)`` to another dtype; all else unchanged."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.to and kwargs.get("dtype") is torch.bfloat16:
            kwargs["dtype"] = self.dtype
        return func(*args, **kwargs)


def muon_newton_schulz(G: torch.Tensor, steps: int, dtype: torch.dtype) -> torch.Tensor:
    """torch.optim.Muon's Newton-Schulz, iterating in ``dtype``."""
    coeffs = (DEFAULT_A, DEFAULT_B, DEFAULT_C)
    if dtype is torch.bfloat16:
        return _zeropower_via_newtonschulz(G, coeffs, steps, EPS)
    with _CastBF16To(dtype):
        return _zeropower_via_newtonschulz(G, coeffs, steps, EPS)


def _plan(quick: bool, device: str) -> list[tuple[int, int, int, int]]:
    """(m, n, warmup, repeats): fewer repeats where one call takes seconds on a CPU."""
    if quick:
        return [(1024, 1024, 2, 10)]
    if device.startswith("cuda"):
        return [(1024, 1024, 5, 30), (4096, 1024, 5, 30), (4096, 4096, 5, 20), (8192, 8192, 3, 10)]
    return [(1024, 1024, 2, 10), (4096, 1024, 1, 6), (4096, 4096, 1, 3)]


def _warm(m: int, n: int, plan: list[tuple[int, int, int, int]]) -> tuple[int, int, int, int]:
    """The plan's (warmup, repeats) for a size, or the largest size's for one not in it."""
    for row in plan:
        if row[:2] == (m, n):
            return row
    return (m, n, *plan[-1][2:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1024x1024 only")
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default=None,
        help="iteration dtype (default: bfloat16 on CUDA, float32 on the CPU)",
    )
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--no-svd", action="store_true", help="skip the SVD comparisons")
    p.add_argument("--sizes", default=None, help="only these sizes, e.g. 4096x4096,1024x1024")
    p.add_argument("--repeats", type=int, default=None, help="timed pairs per size (override)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {args.device} requested but no CUDA device is available")
    dev = torch.device(args.device)
    dtype_name = args.dtype or ("bfloat16" if dev.type == "cuda" else "float32")
    dtype = DTYPES[dtype_name]
    out = args.out or HERE / "results" / f"speed_polar_{dev.type}_{dtype_name}.json"

    gen = torch.Generator().manual_seed(0)
    results = []
    plan = _plan(args.quick, args.device)
    if args.sizes:
        try:
            wanted = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
        except ValueError:
            p.error(f"--sizes takes MxN[,MxN...], got {args.sizes!r}")
        full = _plan(False, args.device)
        plan = [_warm(m, n, full) for m, n in wanted]
    if args.repeats is not None:
        plan = [(m, n, w, args.repeats) for m, n, w, _ in plan]
    for m, n, warmup, repeats in plan:
        G = torch.randn(m, n, generator=gen).to(dev)
        steps = args.steps
        params = {"m": m, "n": n, "steps": steps, "dtype": dtype_name, "table": DEFAULT_TABLE}
        base = partial(muon_newton_schulz, G, steps, dtype)
        cand = partial(msign, G, DEFAULT_TABLE, steps=steps, dtype=dtype)
        r = compare(
            cand,
            base,
            name=f"ns_{m}x{n}",
            warmup=warmup,
            repeats=repeats,
            device=args.device,
            params=params,
        )
        results.append(r)
        print(
            f"{r.name}: ratio {r.ratio_median:.3f} [{r.ratio_min:.3f}, {r.ratio_max:.3f}] "
            f"msign {r.candidate.median_s * 1e3:.1f} ms, muon {r.baseline.median_s * 1e3:.1f} ms",
            flush=True,
        )
        if not args.no_svd and not (dev.type == "cuda" and m * n > 4096 * 4096):
            svd = partial(msign, G, method="svd", dtype=torch.float32)
            r = compare(
                svd,
                base,
                name=f"svd_{m}x{n}",
                warmup=min(warmup, 1),
                repeats=max(3, repeats // 2),
                device=args.device,
                params={**params, "candidate": "msign(G, 'svd'), float32"},
            )
            results.append(r)
            print(
                f"{r.name}: ratio {r.ratio_median:.3f} [{r.ratio_min:.3f}, {r.ratio_max:.3f}] "
                f"svd {r.candidate.median_s * 1e3:.1f} ms",
                flush=True,
            )
    print(markdown_table(results))
    write_json(
        out,
        results,
        device=args.device,
        command=" ".join(["python", *sys.argv]) if argv is None else " ".join(argv),
        dtype=dtype_name,
        steps=args.steps,
        quick=args.quick,
        baseline="torch.optim._muon._zeropower_via_newtonschulz (Muon's coefficients)",
        candidate=f"shared_core.polar.msign(G, {DEFAULT_TABLE!r}, steps, dtype)",
        kernels="Triton SYRK ns_step" if dev.type == "cuda" else "torch reference (addmm)",
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
