"""The GPU check: every Triton kernel compiled and compared, then the GPU benchmarks.

Run on a CUDA machine (``nox -s gpu`` calls it after the test suite):

    python tools/gpu_check.py [--out reports/gpu] [--skip-bench]

1. Each entry of ``shared_core.kernels.KERNELS``, and of every package's registry in the
   ``frontier_opt.kernels`` entry-point group (``"<dist>" = "<module>:KERNELS"``), is
   launched through Triton (compiled, not the interpreter) for each supported dtype on fresh
   random inputs, and its relative Frobenius error against the float64 reference is checked
   against the spec's tolerance; a non-finite output fails, and an element the kernel never
   wrote holds whatever the allocator left there, which the error check catches.
2. Every member's ``benchmarks/*.py`` runs with ``--device cuda --out reports/gpu/<member>/``.
3. A short table is printed last; everything is also written to ``reports/gpu/gpu_check.json``.
Exits non-zero when there is no CUDA device or any check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workspace import ROOT, library_members


def _rel_err(out, ref) -> float:
    import torch

    out64, ref64 = out.to(torch.float64), ref.to(torch.float64)
    return float(torch.linalg.vector_norm(out64 - ref64) / torch.linalg.vector_norm(ref64))


def all_kernels() -> dict:
    """shared-core's kernels, then each package's from the ``frontier_opt.kernels`` group."""
    from importlib.metadata import entry_points

    from shared_core.kernels import KERNELS

    found = dict(KERNELS)
    for ep in sorted(entry_points(group="frontier_opt.kernels"), key=lambda e: e.name):
        for name, spec in ep.load().items():
            found[f"{ep.name}/{name}"] = spec
    return found


def check_kernels() -> list[dict]:
    import torch

    rows = []
    dev = torch.device("cuda")
    for name, spec in all_kernels().items():
        for dtype in spec.dtypes:
            gen = torch.Generator().manual_seed(zlib.crc32(f"{name}/{dtype}".encode()))
            args = spec.example(dev, dtype, gen)
            args64 = tuple(a.to(torch.float64) if torch.is_tensor(a) else a for a in args)
            t0 = time.perf_counter()
            out = spec.launcher(*args)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - t0  # first call: includes compilation
            ref = spec.reference(*args64)
            err = _rel_err(out, ref)
            ok = bool(torch.isfinite(out).all()) and err <= spec.rtol[dtype]
            rows.append(
                {
                    "kernel": name,
                    "dtype": str(dtype).removeprefix("torch."),
                    "rel_err": err,
                    "rtol": spec.rtol[dtype],
                    "first_call_s": seconds,
                    "ok": ok,
                }
            )
    return rows


def run_benchmarks(out: Path) -> list[dict]:
    rows = []
    for m in library_members(ROOT):
        for script in sorted((ROOT / m.path / "benchmarks").glob("[!_]*.py")):
            dest = out / m.dist / f"{script.stem}.json"
            dest.parent.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, str(script), "--device", "cuda", "--out", str(dest)]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, check=False, env={**os.environ, "TRITON_INTERPRET": "0"})
            rows.append(
                {
                    "benchmark": f"{m.dist}/{script.name}",
                    "ok": proc.returncode == 0,
                    "seconds": time.perf_counter() - t0,
                    "json": str(dest),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "gpu")
    p.add_argument("--skip-bench", action="store_true")
    args = p.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        print("gpu_check: unset TRITON_INTERPRET; this check compiles the kernels", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible to torch", file=sys.stderr)
        return 2
    kernels = check_kernels()
    bench = [] if args.skip_bench else run_benchmarks(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"device": torch.cuda.get_device_name(), "kernels": kernels, "benchmarks": bench}
    (args.out / "gpu_check.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\n== GPU check on {doc['device']} ==")
    print(f"{'kernel':<34}{'dtype':<10}{'rel_err':>10}{'rtol':>10}  ok")
    for r in kernels:
        print(
            f"{r['kernel']:<34}{r['dtype']:<10}{r['rel_err']:>10.2e}{r['rtol']:>10.1e}  {r['ok']}"
        )
    for r in bench:
        print(f"bench {r['benchmark']:<40} {r['seconds']:>7.1f} s  {r['ok']}")
    failed = [r for r in kernels + bench if not r["ok"]]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
