"""Probe (issue #8): what separates GDRO-FSQ at r = m from the SMD baseline, and the
equal-samples comparison with more seeds.

Usage: ``python probes/full_info_probe.py synthetic 10 [seeds [names]]`` or
``python probes/full_info_probe.py real [seeds [names]]`` (``names``: comma-separated
names of the variants to run). The ``FSQ r=..`` and ``1-sample`` rows use the current
defaults. Environment: ``PROBE_BUDGET`` (default 6000 samples), ``PROBE_SEED0`` (first seed,
default 0). Prints the mean and standard error of the
gap at N = 6000 samples for each variant (the experiments' quick instances and starts).
"""

import math
import os
import statistics
import sys
import time

import torch
from _instance import instance

from gdro_fsq.experiments.synthetic import run_method
from gdro_fsq.optim import GDROFSQ, OneSampleBandit, SMDFullInfo
from gdro_fsq.schedules import ConstantSize


def main() -> None:
    torch.set_num_threads(1)
    which = sys.argv[1]
    prob, value, init, m, k = instance(sys.argv)
    n_seeds = int(sys.argv[k]) if len(sys.argv) > k else 6
    budget = int(os.environ.get("PROBE_BUDGET", "6000"))
    seed0 = int(os.environ.get("PROBE_SEED0", "0"))
    f, d, g = prob.loss_fn, prob.radius, prob.grad_bound
    c = math.sqrt(2) * d / g
    T = budget // m
    only = sys.argv[k + 1].split(",") if len(sys.argv) > k + 1 else None

    def smd(**kw):
        return lambda p, gen: SMDFullInfo(p, f, m, kw.pop("lr", c), radius=d, generator=gen, **kw)

    def fsq(cls=GDROFSQ, **kw):
        return lambda p, gen: cls(p, f, m, radius=d, grad_bound=g, generator=gen, **kw)

    half = m // 2
    variants = {
        "SMD md/sgd (baseline)": (smd(), m),
        "SMD ftrl/sgd": (smd(q_update="ftrl"), m),
        "SMD md/ftrl-prox": (smd(theta_update="ftrl-prox"), m),
        "SMD ftrl/ftrl-prox (= FSQ r=m)": (smd(q_update="ftrl", theta_update="ftrl-prox"), m),
        "FSQ r=m": (fsq(), m),
        "SMD horizon c_q=1": (smd(lr=2 * d / g, horizon=T), m),
        "SMD horizon c_q=2": (smd(lr=2 * d / g, horizon=T, lr_q=2.0), m),
        "FSQ r=2": (fsq(), 2),
        f"FSQ r={half}": (fsq(), half),
        "1-sample": (fsq(OneSampleBandit), 1),
        "FSQ adaptive r=2": (fsq(q_step="adaptive"), 2),
        f"FSQ adaptive r={half}": (fsq(q_step="adaptive"), half),
        "FSQ adaptive r=m": (fsq(q_step="adaptive"), m),
        "1-sample adaptive": (fsq(OneSampleBandit, q_step="adaptive"), 1),
    }
    for name, (make, r) in variants.items():
        if only is not None and name not in only:
            continue
        t0 = time.time()
        gaps = [
            run_method(prob, value, make, ConstantSize(r, m), budget, init, s)["gap"][-1]
            for s in range(seed0, seed0 + n_seeds)
        ]
        se = statistics.stdev(gaps) / math.sqrt(len(gaps))
        print(
            f"{which} m={m} {name}: {statistics.mean(gaps):.4f} +- {se:.4f} "
            f"[{' '.join(f'{x:.4f}' for x in gaps)}] ({time.time() - t0:.0f}s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
