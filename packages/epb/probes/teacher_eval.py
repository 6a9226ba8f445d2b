"""Teacher and classic heuristics on a shipped TSP test set: the no-distillation rows of the
``tsp`` experiment's table (same functions, same chunking as
:func:`epb.experiments.distill.evaluate`), with the time each row took.

    python packages/epb/probes/teacher_eval.py --n 50 \
        --out packages/epb/results/tsp50_teacher_eval.json

Not a headline experiment: no verdict, only the measured gaps (percent, against the shipped
LKH-3 tours) and seconds.
"""

from __future__ import annotations

import argparse
import time

import torch

from epb.experiments.distill import gap
from epb.experiments.tsp import CLASSICS
from epb.policy import DATA, load_teacher
from epb.reference import load_test_set
from epb.rollout import greedy, multistart
from shared_core.experiment import save_json


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--limit", type=int, default=1000)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    teacher = load_teacher("tsp", a.n)
    inst, ref = load_test_set(f"tsp{a.n}", a.limit)
    chunk = 64 if a.n <= 20 else 16  # as in epb.experiments.tsp
    rows, secs = {}, {}

    def timed(name, fn):
        t0, c0 = time.perf_counter(), time.process_time()
        rows[name] = gap(fn(), ref)
        secs[name] = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
        print(f"{name}: {rows[name]:.3f} % ({secs[name]['wall']:.0f} s wall)", flush=True)

    timed("teacher greedy", lambda: greedy(teacher.bind, inst, chunk=chunk))
    timed("teacher multi-start", lambda: multistart(teacher.bind, inst, chunk=chunk))
    for name, fn in CLASSICS.items():
        timed(name, lambda fn=fn: fn(inst))
    save_json(
        a.out,
        {
            "n": a.n,
            "test_instances": len(ref),
            "teacher_file": f"teacher_tsp{a.n}.pt",
            "teacher_bytes": (DATA / f"teacher_tsp{a.n}.pt").stat().st_size,
            "teacher_meta": getattr(teacher, "checkpoint_meta", {}),
            "gaps": rows,
            "seconds": secs,
        },
    )


if __name__ == "__main__":
    main()
