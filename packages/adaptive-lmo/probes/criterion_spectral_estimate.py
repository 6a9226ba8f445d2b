"""Can a criterion step's SVD be replaced on the overhead benchmark's momenta? (issue 33)

Trains the ``bench_overhead`` candidate (width 256, 3 hidden layers, defaults but
``spectral="gram"``, 1 thread) and,
at steps 151, 161 and 231 (the steady state's criterion spacing is 80), for each hidden
layer's Nesterov direction ``P``:

- the condition number and :func:`adaptive_lmo.spectral.member_error` of the Gram estimate
  (what decides whether the estimate is kept: <= 1e-4);
- how good a warm start the previous criterion step's factors are: the share of ``P``'s
  Frobenius norm off the diagonal of ``U0^T P V0`` (``U0, V0`` from step 151) at spacings 10
  and 80 (a Rayleigh-Ritz/Jacobi refinement needs it far below the singular-value gaps);
- single-thread medians of ``torch.linalg.svd``, the Gram estimate with its check, and
  torch Muon's Newton-Schulz.

Then prints the candidate's own counts (``geometry()``: decompositions by the estimate and by
the SVD).

    python packages/adaptive-lmo/probes/criterion_spectral_estimate.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from adaptive_lmo import AdaptiveLMO
from adaptive_lmo.spectral import criterion_factors, gram_factors, member_error
from shared_core.polar import msign

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_overhead import Batches, mlp

GRID = torch.linspace(0.0, 1.0, 129, dtype=torch.float64)


def _ms(f, n=7):
    f()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return 1e3 * statistics.median(ts)


def main() -> None:
    torch.set_num_threads(1)
    model = mlp(256, 3, "cpu")
    opt = AdaptiveLMO(model, lr=0.02, momentum=0.95, adamw_lr=1e-3, spectral="gram")
    batches = Batches(256, "cpu", 256)
    layers = [model[0].weight, model[2].weight, model[4].weight]
    base = {}
    for t in range(1, 321):
        x, y = batches()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        if t in (151, 161, 231):
            for i, p in enumerate(layers):
                buf = opt.state[p]["momentum_buffer"]
                P = p.grad + 0.95 * (0.95 * buf + p.grad)  # the direction this step would use
                f, K = gram_factors(P)
                s = torch.linalg.svdvals(P.double())
                line = (
                    f"step {t} layer {i}: cond {float(s[0] / s[-1]):.3g}, "
                    f"Gram member_error {float(member_error(K, f.s, GRID).max()):.3g}"
                )
                U, _, Vh = torch.linalg.svd(P.double())
                if t == 151:
                    base[i] = (U, Vh)
                else:
                    U0, Vh0 = base[i]
                    A = U0.T @ P.double() @ Vh0.T
                    off = A - torch.diag(torch.diagonal(A))
                    share = float(off.norm() / A.norm())
                    line += f"; off-diagonal share after {t - 151} steps {share:.3f}"
                print(line)
                if t == 151 and i == 0:
                    svd = _ms(lambda P=P: torch.linalg.svd(P, full_matrices=False))
                    checked = _ms(lambda P=P: criterion_factors(P))
                    alone = _ms(lambda P=P: gram_factors(P))
                    ns = _ms(
                        lambda P=P: msign(
                            P, "muon", steps=5, dtype=torch.bfloat16, check_finite=False
                        )
                    )
                    print(
                        f"  times (ms): svd {svd:.2f}, Gram estimate + check {checked:.2f} "
                        "(falls back here, so this includes the SVD), "
                        f"Gram estimate alone {alone:.2f}, Newton-Schulz {ns:.2f}"
                    )
        opt.step()
    for name, g in opt.geometry().items():
        print(name, "estimated", g["spectral_estimated"], "exact", g["spectral_exact"])


if __name__ == "__main__":
    main()
