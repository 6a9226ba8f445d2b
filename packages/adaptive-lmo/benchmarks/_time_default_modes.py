"""Measure what the default (non-quick) experiment modes would cost, without running them.

Not a library benchmark (the leading underscore keeps it out of ``nox -s bench``).

For each experiment the default config's model and data are built, and every optimizer of the
sweep is trained for ``--steps`` steps at the middle of its default lr grid (seed 0, after 3
untimed warm-up steps) by the experiments' own ``train_loop``; the process CPU time and wall
time per step are measured and multiplied by the number of training steps the default mode runs
(grid points x seeds x steps, plus the teacher-student phase 1, timed as AdaptiveLMO steps).
Evaluation passes are not timed (they are one forward per run). The projection is for 1 thread.

Usage::

    OMP_NUM_THREADS=1 python packages/adaptive-lmo/benchmarks/_time_default_modes.py \\
        --steps 40 --lm-steps 10 \\
        --out packages/adaptive-lmo/benchmarks/results/default_modes_cpu.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from adaptive_lmo.experiments import _common, image, lm, teacher_student


def _time(make_model, opt_name, lr, train, loss_fn, steps, **kw) -> tuple[float, float]:
    """CPU and wall seconds per training step, after 3 untimed warm-up steps."""
    evaluate = lambda m: (0.0, 0.0)  # noqa: E731  (evaluation is not timed)
    batch = kw.pop("batch")
    _common.train_loop(make_model(), opt_name, lr, 0, train, loss_fn, evaluate, steps=3,
                       batch=batch, **kw)  # fmt: skip
    model = make_model()
    c0, w0 = time.process_time(), time.perf_counter()
    _common.train_loop(
        model, opt_name, lr, 0, train, loss_fn, evaluate, steps=steps, batch=batch, **kw
    )
    return (time.process_time() - c0) / steps, (time.perf_counter() - w0) / steps


def measure(name: str, steps: int) -> dict[str, Any]:
    if name == "image":
        cfg = image.config(False)
        data = image.load(0)
        h = cfg["h"]

        def make():
            torch.manual_seed(1000)
            return nn.Sequential(
                nn.Linear(64, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10)
            )

        grids, train, loss_fn, kw = image.grids(cfg["grid"]), data["train"], F.cross_entropy, {}
        jobs_steps = {o: len(g) * cfg["seeds"] * cfg["steps"] for o, g in grids.items()}
    elif name == "lm":
        cfg = lm.config(False)
        data, V = lm.corpus(cfg, 0)

        def make():
            torch.manual_seed(1000)
            return lm.TinyLM(V, cfg["T"], cfg["d"], cfg["layers"])

        grids, train, loss_fn, kw = lm.grids(cfg["grid"]), data["train"], lm.lm_loss, {}
        jobs_steps = {o: len(g) * cfg["seeds"] * cfg["steps"] for o, g in grids.items()}
    elif name == "teacher-student":
        ts = teacher_student
        cfg = ts.config(False)
        pb = ts.make_problem(cfg, 0)

        def make():
            return ts._make_student(cfg, 0)

        grids, train, loss_fn = ts.grids(cfg["grid"]), pb["train"], F.mse_loss
        kw = {"head": None}
        jobs_steps = {o: len(g) * cfg["seeds"] * cfg["steps"] for o, g in grids.items()}
        phase1 = 2 * (len(cfg["alone_exponents"]) + 1) * cfg["grid"] * cfg["alone_seeds"]
        jobs_steps["AdaptiveLMO"] += phase1 * cfg["steps"]
    else:
        raise ValueError(name)
    per: dict[str, dict[str, float]] = {}
    for o, g in grids.items():
        lr = sorted(g)[len(g) // 2]
        extra = {}
        if o.startswith("AdaptiveLMO a="):
            o_run, extra = "AdaptiveLMO", {"exponent": float(o.split("=")[1])}
        elif o == "AdaptiveLMO per-layer best fixed":
            o_run, extra = "AdaptiveLMO", {"exponents": {"A.weight": 1.0, "B.weight": 0.0}}
        else:
            o_run = o
        cpu, wall = _time(make, o_run, lr, train, loss_fn, steps, batch=cfg["batch"], **kw, **extra)
        per[o] = {"cpu_s_per_step": cpu, "wall_s_per_step": wall, "default_steps": jobs_steps[o]}
        print(f"{name:16s} {o:36s} {1e3 * cpu:8.2f} ms CPU/step {1e3 * wall:8.2f} ms wall/step")
    cpu_total = sum(v["cpu_s_per_step"] * v["default_steps"] for v in per.values())
    wall_total = sum(v["wall_s_per_step"] * v["default_steps"] for v in per.values())
    print(f"{name}: projected default mode {cpu_total:.0f} s CPU, {wall_total:.0f} s wall")
    return {
        "config": cfg,
        "timed_steps_per_optimizer": steps,
        "per_optimizer": per,
        "projected_cpu_s": cpu_total,
        "projected_wall_s": wall_total,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40, help="timed steps per optimizer")
    p.add_argument("--lm-steps", type=int, default=10, help="the same for lm (slow steps)")
    p.add_argument("--only", nargs="*", default=["teacher-student", "image", "lm"])
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    res = {
        "threads": 1,
        **{n: measure(n, args.lm_steps if n == "lm" else args.steps) for n in args.only},
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
