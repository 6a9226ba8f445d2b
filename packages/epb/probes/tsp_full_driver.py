"""Driver for `python -m epb.experiments.tsp --out packages/epb/results/tsp_full` (full config).

    python packages/epb/probes/tsp_full_driver.py [WAIT_SECONDS]   # from the repository root

Identical code path (``tsp.main`` -> ``run_experiment``, same seed and configuration), plus:
(1) timestamps around each size's distillation and evaluation; (2) each size's results are
saved to ``tsp{n}_size_result.json`` as soon as that size is done, so a run cut short during
TSP50 keeps TSP20; (3) before TSP50 it waits (at most WAIT_SECONDS) for the TSP50 teacher
checkpoint to be present and loadable, so the TSP20 half can start before the checkpoint lands
(after the deadline the experiment falls back to the TSP20 teacher as coded, and says so).
"""

import sys
import time

import torch

from epb.experiments import tsp
from epb.policy import DATA
from shared_core.experiment import save_json


def ts(msg):
    print(f"[{time.strftime('%H:%M:%S', time.gmtime())} UTC] {msg}", flush=True)


orig_run_size, orig_distil, orig_eval = tsp.run_size, tsp.distil, tsp.evaluate
DEADLINE = time.time() + float(sys.argv[1]) if len(sys.argv) > 1 else time.time()


def wait_for_teacher():
    f = DATA / "teacher_tsp50.pt"
    last = None
    while time.time() < DEADLINE:
        if f.exists():
            size = f.stat().st_size
            if size == last:
                try:
                    torch.load(f, map_location="cpu", weights_only=False)
                    ts(f"teacher_tsp50.pt present ({size} bytes)")
                    return
                except Exception as e:  # partially written
                    ts(f"teacher_tsp50.pt not loadable yet: {e}")
            last = size
        time.sleep(30)
    ts("deadline passed without teacher_tsp50.pt; the experiment falls back as coded")


def run_size(ctx, n, cfg):
    if n == 50:
        wait_for_teacher()
    ts(f"TSP{n}: start, cfg {cfg}")
    t0 = time.perf_counter()
    r = orig_run_size(ctx, n, cfg)
    ts(f"TSP{n}: done (teacher {r['teacher']}, distil {r['distil_seconds']:.0f} s)")
    # save this size's results now, so a run cut short during a later size keeps them
    keep = {k: v for k, v in r.items() if k not in ("port", "hist")}
    keep["programs"] = r["port"].k
    keep["wall_seconds"] = time.perf_counter() - t0
    keep["config"] = cfg
    save_json(ctx.path(f"tsp{n}_size_result.json"), keep)
    return r


def evaluate(*a, **k):
    ts("evaluate: start")
    t = time.perf_counter()
    out = orig_eval(*a, **k)
    ts(f"evaluate: done in {time.perf_counter() - t:.0f} s")
    return out


tsp.run_size, tsp.evaluate = run_size, evaluate
raise SystemExit(tsp.main(["--out", "packages/epb/results/tsp_full"]))
