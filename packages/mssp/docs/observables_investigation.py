"""Why did `observables` (default size) fail on regime I's router slope? Seeds, steps, widths.

Run: ``python packages/mssp/docs/observables_investigation.py I mup`` (in regime I muP and
MSSP are the same model). For base widths 16 and 32 and 3, 10, 30 Adam steps (lr 1e-2, batch
128, the experiment's task), 6 seeds per size s = 1, 2, 4, 8; prints the slope of the
per-expert and router own-weight updates on log s for seeds 0-2, seeds 3-5 and all six, the
slope over s >= 2 only, the pairwise slopes and the per-seed spread. Results:
``docs/observables-investigation.md``.
"""

import math
import statistics
import sys

import torch

from mssp.layers import MoEModel
from mssp.observables import Observables, log_slope, scaled_shape
from mssp.parameterize import parameterize
from mssp.train import ClusterTeacher, train

KEYS = ("du_own", "dlogits_own")


def per_seed(scheme, regime, base, scales, steps, seed, lr=1e-2, batch=128):
    """The two observables after ``steps`` steps at every size, one seed (as coord_check)."""
    teacher = ClusterTeacher(8, 1, clusters=8, seed=0)
    out = {k: [] for k in KEYS}
    for s in scales:
        torch.manual_seed(1000 * seed + s)
        sh = scaled_shape(base, regime, s)
        model = MoEModel(8, 1, n=sh["N"], ne=sh["Ne"], m=sh["M"], k=sh["K"], depth=sh["L"])
        groups = parameterize(model, scheme, "adam", regime=regime, base_shapes=base, lr=lr)
        x_probe, _ = teacher.sample(256, torch.Generator().manual_seed(99))
        obs = Observables(x_probe)
        train(model, groups, "adam", teacher, steps=steps, batch=batch, seed=seed, callback=obs)
        for k in KEYS:
            out[k].append(obs.history[-1][k])
    return out


def mean(runs, k, n):
    return [sum(r[k][i] for r in runs) / len(runs) for i in range(n)]


def main(regime, scheme):
    torch.set_num_threads(1)
    scales = [1, 2, 4, 8]
    for base_n in (16, 32):
        base = {"N": base_n, "Ne": base_n, "M": 4, "K": 1, "L": 1}
        for steps in (3, 10, 30):
            runs = [per_seed(scheme, regime, base, scales, steps, sd) for sd in range(6)]
            for k in KEYS:
                m6 = mean(runs, k, len(scales))
                pair = [
                    math.log(m6[i + 1] / m6[i]) / math.log(scales[i + 1] / scales[i])
                    for i in range(len(scales) - 1)
                ]
                sd = statistics.stdev(log_slope(scales, r[k]) for r in runs)
                print(
                    f"{regime} {scheme} base N={base_n} steps={steps} {k}: "
                    f"seeds 0-2 {log_slope(scales, mean(runs[:3], k, len(scales))):+.3f}, "
                    f"seeds 3-5 {log_slope(scales, mean(runs[3:], k, len(scales))):+.3f}, "
                    f"all {log_slope(scales, m6):+.3f}, s>=2 {log_slope(scales[1:], m6[1:]):+.3f}, "
                    f"pairwise {[round(p, 2) for p in pair]}, per-seed sd {sd:.3f}",
                    flush=True,
                )


if __name__ == "__main__":
    main(*sys.argv[1:3])
