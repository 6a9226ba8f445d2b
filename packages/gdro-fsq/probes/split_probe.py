"""Probe (issue #8, third round): where GDRO-FSQ at r = 2 loses to r = 1 at equal samples.

Usage: ``python probes/split_probe.py synthetic 50 [seeds [names]]`` or
``python probes/split_probe.py real [seeds [names]]``. Environment: ``PROBE_BUDGET`` (samples,
default 10000), ``PROBE_SEED0``. For each variant: mean +- standard error of the gap at N, the
fraction of rounds whose q step sits at the cap, and the final played / uncapped q step.

Variants: ``1-sample`` and ``FSQ r=2`` (defaults); ``r=2 theta x sqrt2`` (the theta constant
times sqrt 2: the same total theta step length per sample as r = 1); ``r=2 no cap`` (q step
uncapped apart from gamma <= 1/2: the estimates are then unbounded, a diagnostic only);
``r=2 cap r=1`` (the r = 1 cap 1/(2m)); ``1-sample no cap``; ``... theta |g|`` (the theta
step on the observed gradient norms instead of kappa); plus whatever the
module-level ``EXTRA`` dict adds.
"""

import math
import os
import statistics
import sys
import time

import torch
from _instance import instance

from gdro_fsq.experiments.synthetic import run_method
from gdro_fsq.optim import ADAPTIVE_V0, GDROFSQ, q_step_size
from gdro_fsq.schedules import ConstantSize

EXTRA: dict = {}


class Traced(GDROFSQ):
    """GDROFSQ recording the played and the uncapped adaptive q step of every round."""

    cap_scale = 1.0

    def _step_cap(self, r: int) -> float:
        return min(1.0, self.cap_scale * super()._step_cap(r))

    def _inclusion(self, r, t):
        pi, weights = super()._inclusion(r, t)
        free = q_step_size(self.lr_q, self.n_groups, ADAPTIVE_V0 + self.game["var_obs"])
        tr = self.game.setdefault("trace", [0, 0])
        tr[0] += 1
        tr[1] += int(weights.eta < free * (1 - 1e-12))
        self.game["eta_free"] = free
        return pi, weights


class NoCap(Traced):
    cap_scale = 1e9


class HalfCap(Traced):
    cap_scale = 0.5


class NormStep(Traced):
    """Diagnostic: the theta step on the observed gradient norms, K_t = sum_j |c_j g_j|^2/G^2
    (AdaGrad-norm proximal FTRL) instead of sum_j (c_j kappa_j)^2."""

    def _theta_sq(self, kappa, grads):
        # (now the option theta_step="observed", without the floor)
        sq = sum(float((g**2).sum()) for g in grads if g is not None)
        return max(sq / self.grad_bound**2, 1e-12)


def main() -> None:
    torch.set_num_threads(1)
    which = sys.argv[1]
    prob, value, init, m, k = instance(sys.argv)
    n_seeds = int(sys.argv[k]) if len(sys.argv) > k else 4
    only = sys.argv[k + 1].split(",") if len(sys.argv) > k + 1 else None
    budget = int(os.environ.get("PROBE_BUDGET", "10000"))
    seed0 = int(os.environ.get("PROBE_SEED0", "0"))
    f, d, g = prob.loss_fn, prob.radius, prob.grad_bound

    def fsq(cls=Traced, **kw):
        return lambda p, gen: cls(p, f, m, radius=d, grad_bound=g, generator=gen, **kw)

    variants = {
        "1-sample": (fsq(), 1),
        "FSQ r=2": (fsq(), 2),
        "r=2 theta x sqrt2": (fsq(lr_theta=2 * d / g), 2),
        "r=2 no cap": (fsq(NoCap), 2),
        "r=2 cap r=1": (fsq(HalfCap), 2),
        "1-sample no cap": (fsq(NoCap), 1),
        "1-sample theta / sqrt2": (fsq(lr_theta=d / g), 1),
        "1-sample theta |g|": (fsq(NormStep), 1),
        "r=2 theta |g|": (fsq(NormStep), 2),
    }
    variants.update({n: (fsq(cls, **kw), r) for n, (cls, kw, r) in EXTRA.items()})
    holder = {}
    for name, (make, r) in variants.items():
        if only is not None and name not in only:
            continue
        t0 = time.time()
        gaps, binds, etas = [], [], []
        for s in range(seed0, seed0 + n_seeds):

            def mk(p, gen, make=make):
                holder["opt"] = make(p, gen)
                return holder["opt"]

            gaps.append(run_method(prob, value, mk, ConstantSize(r, m), budget, init, s)["gap"][-1])
            opt = holder["opt"]
            tr = opt.game.get("trace", [1, 0])
            binds.append(tr[1] / tr[0])
            etas.append((opt.round_weights.eta, opt.game.get("eta_free", math.nan)))
        se = statistics.stdev(gaps) / math.sqrt(len(gaps)) if len(gaps) > 1 else 0.0
        print(
            f"{which} m={m} N={budget} {name}: {statistics.mean(gaps):.4f} +- {se:.4f} "
            f"[{' '.join(f'{x:.4f}' for x in gaps)}] capped {statistics.mean(binds):.2f} "
            f"eta {statistics.mean(e[0] for e in etas):.4f}/"
            f"{statistics.mean(e[1] for e in etas):.4f}"
            f" ({time.time() - t0:.0f}s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
