"""Probe (issue #8, fourth round): is GDRO-FSQ at r = 2 behind the 1-sample method (r = 1) at
equal samples, or is the shortfall seed noise? Paired by seed.

Usage: ``python probes/paired_probe.py synthetic M SEEDS [names]`` or
``python probes/paired_probe.py real SEEDS [names]``. Environment: ``PROBE_BUDGET`` (samples,
default 6000), ``PROBE_SEED0`` (default 0), ``PROBE_OUT`` (a JSON file for the per-seed gaps),
``PROBE_EXTRA=1`` (also the ``theta_step="observed"`` and ``q_bonus`` variants),
``PROBE_BASE`` (the variant the others are paired with, default ``1-sample``).

Rule (fixed before the runs): for each seed ``s`` (the same seed, instance and start for every
variant), ``d_s = log(gap_variant,s / gap_1-sample,s)``; the variant is called *behind* the
1-sample method when the two-sided paired t-test on ``d`` rejects 0 at level 0.05 with mean
``d > 0``, *ahead* when it rejects with mean ``d < 0``, else *not separated*. Printed: the
geometric-mean ratio ``exp(mean d)`` with its 95% t-interval.
"""

import json
import math
import os
import statistics
import sys
import time

import torch
from _instance import instance

from gdro_fsq.experiments.synthetic import run_method
from gdro_fsq.optim import GDROFSQ
from gdro_fsq.schedules import ConstantSize

#: extra variants (``PROBE_EXTRA=1``): name -> (class, keyword arguments, r).
VARIANTS: dict = {
    "1-sample |g|": (GDROFSQ, {"theta_step": "observed"}, 1),
    "FSQ r=2 |g|": (GDROFSQ, {"theta_step": "observed"}, 2),
    # the experimental bonus has no bound: run without grad_bound (no bound recorded), with
    # the default theta constant sqrt(2) D / G passed explicitly
    "FSQ r=2 bonus 1": (GDROFSQ, {"q_bonus": 1.0, "grad_bound": None, "lr_theta": "default"}, 2),
    "1-sample bonus 1": (GDROFSQ, {"q_bonus": 1.0, "grad_bound": None, "lr_theta": "default"}, 1),
}


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (SciPy)."""
    from scipy.stats import t

    return float(t.ppf(0.975, df))


def paired_summary(gaps: list[float], base: list[float]) -> str:
    d = [math.log(a / b) for a, b in zip(gaps, base, strict=True)]
    mu, se = statistics.mean(d), statistics.stdev(d) / math.sqrt(len(d))
    q = t975(len(d) - 1)
    lo, hi = mu - q * se, mu + q * se
    verdict = "behind" if lo > 0 else "ahead" if hi < 0 else "not separated"
    return (
        f"ratio {math.exp(mu):.3f} [95% {math.exp(lo):.3f}, {math.exp(hi):.3f}] "
        f"t={mu / se:.2f} -> {verdict}"
    )


def main() -> None:
    torch.set_num_threads(1)
    which = sys.argv[1]
    prob, value, init, m, k = instance(sys.argv)
    n_seeds = int(sys.argv[k])
    only = sys.argv[k + 1].split(",") if len(sys.argv) > k + 1 else None
    budget = int(os.environ.get("PROBE_BUDGET", "6000"))
    seed0 = int(os.environ.get("PROBE_SEED0", "0"))
    f, d, g = prob.loss_fn, prob.radius, prob.grad_bound

    def fsq(cls=GDROFSQ, **kw):
        args = {"radius": d, "grad_bound": g, **kw}
        if args.get("lr_theta") == "default":
            args["lr_theta"] = math.sqrt(2) * d / g
        return lambda p, gen: cls(p, f, m, generator=gen, **args)

    variants = {"1-sample": (fsq(), 1), "FSQ r=2": (fsq(), 2)}
    if os.environ.get("PROBE_EXTRA"):
        variants.update({n: (fsq(cls, **kw), r) for n, (cls, kw, r) in VARIANTS.items()})
    base = os.environ.get("PROBE_BASE", "1-sample")
    out = {"which": which, "m": m, "budget": budget, "seed0": seed0, "gaps": {}}
    for name, (make, r) in variants.items():
        if only is not None and name not in only and name != base:
            continue
        t0 = time.time()
        gaps = [
            run_method(prob, value, make, ConstantSize(r, m), budget, init, s)["gap"][-1]
            for s in range(seed0, seed0 + n_seeds)
        ]
        out["gaps"][name] = gaps
        se = statistics.stdev(gaps) / math.sqrt(len(gaps))
        line = f"{which} m={m} N={budget} {name}: {statistics.mean(gaps):.4f} +- {se:.4f}"
        print(f"{line} ({time.time() - t0:.0f}s)", flush=True)
    for name, gaps in out["gaps"].items():
        if name != base and base in out["gaps"]:
            print(f"  {name} vs {base}: {paired_summary(gaps, out['gaps'][base])}", flush=True)
    if os.environ.get("PROBE_OUT"):
        with open(os.environ["PROBE_OUT"], "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
