"""The whole GPU pass in one command, on a machine with no package index and no uv.

The GPU machines this project borrows are bare: their own ``python3`` has torch, triton, numpy
and scipy, nothing can be downloaded there, and a lease lasts minutes. So this driver needs
nothing but that interpreter and this repository:

    python3 tools/gpu_offline.py OUT_DIR [--python python3] [--wheels .whl] [--budget 450]
    python3 tools/gpu_offline.py OUT_DIR --rehearse      # the same path on a CPU, tiny sizes

1. Every member's ``src/`` goes on ``PYTHONPATH`` (nothing is installed); wheels in ``--wheels``
   (pure-Python extras such as traker or geoopt, carried with the tree) are unpacked into a
   private folder with ``pip install --no-index --no-deps --target`` when any are present.
2. Steps, in order, each in its own subprocess under a time cap, so a crash or a hang costs one
   row, not the pass: ``env`` (device, versions), ``kernels`` (every registered Triton kernel
   compiled and compared with its float64 reference, as ``tools/gpu_check.py`` does, the
   registries read from the members' ``pyproject.toml`` because nothing is installed),
   ``tests`` (each member's ``gpu``-marked test files) and ``bench`` (the headline GPU
   benchmarks of ``BENCHMARKS`` below, capped in size to fit the lease).
3. ``OUT_DIR/gpu_offline.json`` is rewritten after every row (a pass cut short still returns
   what finished); ``OUT_DIR/gpu_offline.log`` holds every subprocess's output. Two files: a
   device tool that returns at most a few files gets everything.

``--rehearse`` runs the same steps on a CPU with ``TRITON_INTERPRET=1``, CUDA hidden and tiny
sizes: the CI test ``integration-tests/tests/test_tooling.py`` runs it under a bare interpreter
(``-S``, members reachable only through ``PYTHONPATH``) to prove the offline path before a GPU
lease is spent on it. Exit status: 0 when every row passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workspace import ROOT, library_members

ENTRY_GROUP = "frontier_opt.kernels"


@dataclass(frozen=True)
class Bench:
    """One benchmark run: its script, its GPU arguments, its rehearsal arguments, its cap."""

    member: str
    script: str  # relative to the member folder
    gpu_args: tuple[str, ...]
    rehearse_args: tuple[str, ...]
    cap_s: float
    goal: str = ""


# Sized to fit one lease, in order of priority (a pass cut short loses the last rows).
BENCHMARKS: tuple[Bench, ...] = (
    Bench(
        "shared-core",
        "benchmarks/speed_polar.py",
        ("--device", "cuda", "--dtype", "bfloat16", "--sizes", "4096x4096,8192x8192", "--no-svd"),
        ("--device", "cpu", "--sizes", "72x56", "--repeats", "2", "--no-svd"),
        120,
        "Triton Newton-Schulz >= 1.3x torch.optim.Muon's at 4096^2 and 8192^2 in bf16",
    ),
    Bench(
        "shared-core",
        "benchmarks/accuracy_polar.py",
        ("--device", "cuda", "--dtype", "bfloat16"),
        ("--device", "cpu", "--quick"),
        90,
        "bf16 polar-factor accuracy against float64",
    ),
    Bench(
        "nfi",
        "benchmarks/bench_stable_ce.py",
        ("--device", "cuda"),
        ("--device", "cpu", "--size", "64x1000", "--repeats", "2", "--monitor-pairs", "0"),
        120,
        "StableCrossEntropy fwd+bwd (Triton backward) <= 1.0x torch CE, 4096 x 32768, 3 dtypes",
    ),
    Bench(
        "adaptive-lmo",
        "benchmarks/bench_overhead.py",
        ("--device", "cuda", "--quick"),
        ("--device", "cpu", "--quick", "--repeats", "1"),
        90,
        "AdaptiveLMO <= 1.03x torch.optim.Muon (+AdamW) per opt.step()",
    ),
    # The full-size sketch comparison did not finish in 150 s on the first H200 pass: the
    # quick size (p = 1M, k = 1024) runs first so a pass always returns a sketch figure.
    Bench(
        "trak-theory",
        "benchmarks/sketch_gpu.py",
        ("--device", "cuda", "--quick"),
        ("--device", "cpu", "--quick"),
        60,
        "sketch at p = 1M, k = 1024 faster than a materialised projection and traker's",
    ),
    Bench(
        "diloco-ef",
        "benchmarks/bench_topk.py",
        ("--device", "cuda"),
        ("--device", "cpu", "--quick"),
        60,
        "top-k / quantise kernels against torch",
    ),
    Bench(
        "imuon",
        "benchmarks/step_time.py",
        ("--device", "cuda"),
        ("--device", "cpu", "--quick", "--only-fixed", "--repeats", "1"),
        150,
        "IMuon step time against torch.optim.Muon (Euclidean, fixed rank r = 8, 64)",
    ),
    Bench(
        "trak-theory",
        "benchmarks/sketch_gpu.py",
        ("--device", "cuda"),
        ("--device", "cpu", "--quick"),
        150,
        "sketch at p = 10M, k = 4096 faster than a materialised projection and traker's",
    ),
    # the per-step price of a layer off a = 0 and of an SVD against Newton-Schulz on the
    # device: what a time-based criterion spacing for the GPU goal would be sized from
    Bench(
        "adaptive-lmo",
        "benchmarks/bench_mixture.py",
        ("--device", "cuda", "--quick"),
        ("--device", "cpu", "--quick", "--repeats", "2"),
        60,
        "Newton-Schulz mixture and SVD route against torch Muon's Newton-Schulz (no goal)",
    ),
)


@dataclass
class Pass:
    """The running record, written to disk after every row."""

    out: Path
    rehearse: bool
    deadline: float
    doc: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = (self.out / "gpu_offline.log").open("w")
        self.doc = {
            "mode": "rehearse" if self.rehearse else "gpu",
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "env": {},
            "kernels": [],
            "tests": [],
            "bench": [],
        }

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def save(self) -> None:
        self.doc["ok"] = all(
            r.get("ok") for k in ("kernels", "tests", "bench") for r in self.doc[k]
        )
        tmp = self.out / "gpu_offline.json.tmp"
        tmp.write_text(json.dumps(self.doc, indent=2, default=str) + "\n")
        tmp.replace(self.out / "gpu_offline.json")

    def run(self, label: str, cmd: list[str], env: dict, cap_s: float) -> dict:
        """Run ``cmd`` with a cap (never past the pass's deadline); log all output."""
        cap = max(1.0, min(cap_s, self.left()))
        self.log.write(f"\n===== {label}: {shlex.join(cmd)} (cap {cap:.0f} s)\n")
        self.log.flush()
        print(f"[gpu_offline] {label} (cap {cap:.0f} s)", flush=True)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=cap, check=False
            )
            rc, text = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as e:
            rc = None
            text = _text(e.stdout) + _text(e.stderr) + f"\n[timed out after {cap:.0f} s]\n"
        seconds = time.monotonic() - t0
        self.log.write(text)
        self.log.flush()
        tail = text.strip().splitlines()[-3:]
        print(f"[gpu_offline]   rc={rc} {seconds:.1f} s  {' | '.join(tail)[:300]}", flush=True)
        return {"rc": rc, "seconds": round(seconds, 2), "timed_out": rc is None, "output": text}


def _text(b) -> str:
    if b is None:
        return ""
    return b.decode(errors="replace") if isinstance(b, bytes) else b


def kernel_registries(root: Path = ROOT) -> dict[str, str]:
    """``{dist: "module:ATTR"}`` of every member's kernel registry, read from its pyproject.

    The installed entry points say the same, but nothing is installed on a bare GPU machine.
    shared-core's own registry (``shared_core.kernels:KERNELS``) comes first.
    """
    found = {"shared-core": "shared_core.kernels:KERNELS"}
    for m in library_members(root):
        meta = tomllib.loads((root / m.path / "pyproject.toml").read_text())
        eps = meta["project"].get("entry-points", {}).get(ENTRY_GROUP, {})
        found.update(eps)
    return found


def gpu_test_files(root: Path = ROOT) -> dict[str, list[str]]:
    """``{dist: [test files]}``: the files of each member that hold ``gpu``-marked tests."""
    out: dict[str, list[str]] = {}
    for m in library_members(root):
        files = [
            f.relative_to(root).as_posix()
            for f in sorted((root / m.path / "tests").glob("test_*.py"))
            if "mark.gpu" in f.read_text()
        ]
        if files:
            out[m.dist] = files
    return out


def pythonpath(extra: list[str]) -> str:
    srcs = [str(ROOT / m.path / "src") for m in library_members(ROOT)]
    old = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join([*extra, *srcs, *([old] if old else [])])


def unpack_wheels(py: list[str], wheels: Path, dest: Path, p: Pass, env: dict) -> list[str]:
    found = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
    if not found:
        return []
    cmd = [*py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
    cmd += ["--no-cache-dir", "--upgrade", "--target", str(dest), *map(str, found)]
    row = p.run("wheels", cmd, env, 120)
    p.doc["env"]["wheels"] = {"files": [w.name for w in found], "rc": row["rc"]}
    return [str(dest)] if row["rc"] == 0 else []


# ---- worker modes: run inside the subprocesses, where torch is imported ------------------------

_ENV_PROBE = """
import json, platform, torch
d = {"python": platform.python_version(), "torch": torch.__version__,
     "cuda_available": torch.cuda.is_available(), "cpu": platform.processor() or platform.machine()}
try:
    import triton; d["triton"] = triton.__version__
except Exception as e:
    d["triton"] = repr(e)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    d.update(device=torch.cuda.get_device_name(0),
             capability=list(torch.cuda.get_device_capability(0)),
             sms=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 1),
             cuda=torch.version.cuda)
print("ENV " + json.dumps(d))
"""


def _kernel_worker(device: str, registries: dict[str, str], path: Path) -> int:
    """Launch every kernel for every dtype; compare with the float64 reference; write rows."""
    import importlib
    import zlib

    import torch

    rows = []
    dev = torch.device(device)
    for dist, target in registries.items():
        mod, _, attr = target.partition(":")
        try:
            registry = getattr(importlib.import_module(mod), attr)
        except Exception as e:
            rows.append({"kernel": dist, "ok": False, "error": f"import {target}: {e!r}"})
            continue
        for name, spec in registry.items():
            label = name if dist == "shared-core" else f"{dist}/{name}"
            for dtype in spec.dtypes:
                row = {"kernel": label, "dtype": str(dtype).removeprefix("torch.")}
                try:
                    gen = torch.Generator().manual_seed(zlib.crc32(f"{label}/{dtype}".encode()))
                    args = spec.example(dev, dtype, gen)
                    args64 = tuple(a.to(torch.float64) if torch.is_tensor(a) else a for a in args)
                    t0 = time.perf_counter()
                    out = spec.launcher(*args)
                    if dev.type == "cuda":
                        torch.cuda.synchronize()
                    row["first_call_s"] = round(time.perf_counter() - t0, 3)  # compile included
                    ref = spec.reference(*args64)
                    o64, r64 = out.to(torch.float64), ref.to(torch.float64)
                    err = float(torch.linalg.vector_norm(o64 - r64) / torch.linalg.vector_norm(r64))
                    row.update(
                        rel_err=err,
                        rtol=spec.rtol[dtype],
                        ok=bool(torch.isfinite(out).all()) and err <= spec.rtol[dtype],
                    )
                except Exception as e:  # one broken kernel must not hide the others
                    row.update(ok=False, error=repr(e))
                rows.append(row)
                path.write_text(json.dumps(rows, indent=2) + "\n")
                print(json.dumps(row), flush=True)
    path.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if rows and all(r["ok"] for r in rows) else 1


# ---- the driver --------------------------------------------------------------------------------


def _pytest_counts(text: str) -> dict[str, int]:
    import re

    counts = {}
    lines = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed|skipped)", ln)]
    for n, what in re.findall(
        r"(\d+) (passed|failed|skipped|errors?|deselected)", "".join(lines[-1:])
    ):
        counts[what] = int(n)
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out", type=Path, help="folder for gpu_offline.json and gpu_offline.log")
    ap.add_argument("--python", default="python3", help="interpreter (and flags) for every step")
    ap.add_argument("--wheels", type=Path, default=ROOT / ".whl", help="carried wheels, if any")
    ap.add_argument("--rehearse", action="store_true", help="CPU, interpreter mode, tiny sizes")
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for the whole pass")
    ap.add_argument("--steps", default="env,kernels,tests,bench", help="comma-separated subset")
    ap.add_argument("--only-bench", default=None, help="comma-separated substrings of scripts")
    ap.add_argument("--only-tests", default=None, help="comma-separated members to test")
    ap.add_argument("--kernel-worker", nargs=2, metavar=("DEVICE", "JSON"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.kernel_worker:
        device, path = args.kernel_worker
        return _kernel_worker(device, kernel_registries(), Path(path))

    steps = set(args.steps.split(","))
    py = shlex.split(args.python)
    p = Pass(args.out, args.rehearse, time.monotonic() + args.budget)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONUNBUFFERED"] = "1"
    if args.rehearse:
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    # Per-step files live outside OUT: OUT carries exactly two files back from a device.
    scratch = Path(tempfile.mkdtemp(prefix="gpu_offline_"))
    env["PYTHONPATH"] = pythonpath(unpack_wheels(py, args.wheels, scratch / "site", p, env))
    p.doc["env"]["pythonpath_members"] = len(library_members(ROOT))
    p.save()

    if "env" in steps:
        row = p.run("env", [*py, "-c", _ENV_PROBE], env, 60)
        for line in row["output"].splitlines():
            if line.startswith("ENV "):
                p.doc["env"].update(json.loads(line[4:]))
        if not args.rehearse and not p.doc["env"].get("cuda_available"):
            p.doc["env"]["error"] = "no CUDA device visible to torch: use --rehearse on a CPU"
            p.save()
            print(p.doc["env"]["error"], file=sys.stderr)
            return 2
        p.save()

    # Correctness steps compile one autotune candidate per kernel; benchmarks search them all.
    check_env = {**env, "FRONTIER_TRITON_AUTOTUNE": "first"}
    if "kernels" in steps:
        dest = scratch / "kernels.json"
        dev = "cpu" if args.rehearse else "cuda"
        worker = [*py, str(Path(__file__).resolve()), str(args.out), "--kernel-worker", dev]
        row = p.run("kernels", [*worker, str(dest)], check_env, 240 if args.rehearse else 120)
        rows = json.loads(dest.read_text()) if dest.is_file() else []
        if not rows or row["timed_out"]:
            rows.append({"kernel": "(pass)", "ok": False, "error": row["output"][-2000:]})
        p.doc["kernels"] = rows
        p.save()

    if "tests" in steps:
        for dist, files in gpu_test_files().items():
            if args.only_tests and dist not in args.only_tests.split(","):
                continue
            cmd = [*py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", *files]
            row = p.run(f"tests {dist}", cmd, check_env, 90)
            counts = _pytest_counts(row["output"])
            # rc 5: nothing selected, which is a failure on a GPU (every file holds gpu tests)
            ok = row["rc"] == 0 and (args.rehearse or counts.get("passed", 0) > 0)
            ok = ok or (args.rehearse and row["rc"] in (0, 5))
            p.doc["tests"].append(
                {
                    "member": dist,
                    "files": files,
                    "ok": ok,
                    "rc": row["rc"],
                    "seconds": row["seconds"],
                    "counts": counts,
                    "failures": [
                        ln for ln in row["output"].splitlines() if ln.startswith("FAILED")
                    ],
                }
            )
            p.save()

    if "bench" in steps:
        where = {m.dist: m.path for m in library_members(ROOT)}
        for b in BENCHMARKS:
            wanted = args.only_bench.split(",") if args.only_bench else [""]
            if not any(w in f"{b.member}/{b.script}" for w in wanted):
                continue
            dest = scratch / f"{b.member}_{Path(b.script).stem}.json"
            bargs = b.rehearse_args if args.rehearse else b.gpu_args
            cmd = [*py, f"{where[b.member]}/{b.script}", *bargs, "--out", str(dest)]
            row = p.run(f"bench {b.member}/{b.script}", cmd, env, b.cap_s)
            result = json.loads(dest.read_text()) if dest.is_file() else None
            p.doc["bench"].append(
                {
                    "member": b.member,
                    "script": b.script,
                    "args": list(bargs),
                    "goal": b.goal,
                    "ok": row["rc"] == 0 and result is not None,
                    "rc": row["rc"],
                    "seconds": row["seconds"],
                    "timed_out": row["timed_out"],
                    "result": result,
                    "tail": row["output"][-1500:] if row["rc"] != 0 else "",
                }
            )
            p.save()

    p.doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    p.save()
    bad = [r for k in ("kernels", "tests", "bench") for r in p.doc[k] if not r.get("ok")]
    print(
        f"[gpu_offline] {'all rows passed' if not bad else f'{len(bad)} rows failed'}; "
        f"{args.out / 'gpu_offline.json'}"
    )
    return 0 if not bad else 1


if __name__ == "__main__":
    raise SystemExit(main())
