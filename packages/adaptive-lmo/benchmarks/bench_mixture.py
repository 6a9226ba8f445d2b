"""A layer off a = 0: the Newton-Schulz mixture against the SVD route, both against torch Muon.

Per matrix, the cost of one step's direction for a layer whose exponent is ``a`` (default
0.3, the order the criterion picks on the overhead benchmark's first layer): the mixture
(:func:`adaptive_lmo.mixture.mixed_member`, weights fitted once as on a criterion step) for
each step count the optimizer may take (:data:`adaptive_lmo.mixture.MIXTURE_STEPS`), the
exact member by SVD (``lmo_direction(..., method="svd")``, what such a layer paid on every
step before the mixture), each timed against torch Muon's own polar routine
(``torch.optim._muon._zeropower_via_newtonschulz``, bf16, 5 steps) on the same matrix,
interleaved pairs through ``shared_core.bench.compare``. The matrix is a momentum-like
direction: Gaussian with a power-law column scale (condition number ~1e2-1e3). Also recorded:
the mixture's relative Frobenius error against the exact member and the fit's own residual,
so speed and accuracy come from the same run.

    python packages/adaptive-lmo/benchmarks/bench_mixture.py --quick --threads 1 \\
        --out packages/adaptive-lmo/benchmarks/results/mixture_routes_cpu.json
    python packages/adaptive-lmo/benchmarks/bench_mixture.py --device cuda \\
        --out packages/adaptive-lmo/benchmarks/results/mixture_routes_cuda.json
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch.optim._muon import _zeropower_via_newtonschulz

from adaptive_lmo.fractional import lmo_direction
from adaptive_lmo.mixture import (
    MIXTURE_STEPS,
    fit_weights,
    mixed_member,
    polar_norm,
    target_spectrum,
)
from shared_core.bench import compare, write_json
from shared_core.polar import coefficients_for, default_rtol, newton_schulz_spectra

MUON_ABC = (3.4445, -4.7750, 2.0315)


def direction(m: int, n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, n, generator=g) * torch.logspace(0, -1.5, n)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="widths 256 and 512 only")
    ap.add_argument("--a", type=float, default=0.3)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (times synchronised)")
    ap.add_argument("--out", default="packages/adaptive-lmo/benchmarks/results/mixture.json")
    args = ap.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    widths = [256, 512] if args.quick else [256, 512, 1024]
    results, extra = [], []
    coeffs = [tuple(c) for c in coefficients_for("muon", 5)]
    for w in widths:
        P = direction(w, w).to(args.device)
        U, s, Vh = torch.linalg.svd(P.double().cpu(), full_matrices=False)
        rtol = default_rtol(w, w, torch.float32)
        weights = {k: fit_weights(s, args.a, "polar", rtol, k).tolist() for k in MIXTURE_STEPS}
        fro = polar_norm(s, "polar", rtol)  # the optimizer restores sqrt(k) on every step
        base = lambda P=P: _zeropower_via_newtonschulz(P, MUON_ABC, 5, 1e-7)  # noqa: E731
        params = {"m": w, "n": w, "a": args.a, "dtype": "float32", "device": args.device}
        arms = [
            (
                f"mixture_k{k}",
                lambda P=P, wt=weights[k], f=fro: mixed_member(P, wt, args.a, "polar", f),
            )
            for k in MIXTURE_STEPS
        ]
        arms.append(("svd", lambda P=P: lmo_direction(P, args.a, method="svd", check_finite=False)))
        for name, cand in arms:
            r = compare(
                cand,
                base,
                name=f"{name}_vs_torch_muon_ns_w{w}",
                repeats=args.repeats,
                warmup=2,
                device=args.device,
                params=params,
            )
            results.append(r)
            print(f"w={w} {name}: {r.ratio_median:.2f}x [{r.ratio_min:.2f}, {r.ratio_max:.2f}]")
        t = target_spectrum(s, args.a, "polar", rtol)
        exact = (U * t) @ Vh
        for k in MIXTURE_STEPS:
            D = mixed_member(P, weights[k], args.a, "polar", fro).double().cpu()
            wk = torch.tensor(weights[k], dtype=torch.float64)
            fit = torch.linalg.vector_norm(newton_schulz_spectra(s, coeffs[:k]) @ wk - t)
            err = float(torch.linalg.vector_norm(D - exact) / torch.linalg.vector_norm(exact))
            extra.append(
                {
                    "name": f"mixture_k{k}_accuracy_w{w}",
                    "steps": k,
                    "relative_error_vs_exact_member": err,
                    "fit_residual_relative": float(fit / torch.linalg.vector_norm(t)),
                    "max_abs_weight": float(wk.abs().max()),
                    "condition_number": float(s[0] / s[-1]),
                }
            )
            res = extra[-1]["fit_residual_relative"]
            print(f"w={w} k={k} mixture error vs exact member {err:.4f} (fit residual {res:.4f})")
    cmd = "python packages/adaptive-lmo/benchmarks/bench_mixture.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    write_json(args.out, [*results, *extra], device=args.device, command=cmd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
