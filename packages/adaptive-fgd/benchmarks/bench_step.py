"""Cost of one FGD step at 10k sample points, and of evaluating the merged iterate.

Three ratios, each measured side by side in one run with ``shared_core.bench.compare``:

* ``step_kernel_vs_rff``: one fixed-size FGD step with kernel centres vs random Fourier
  features (same size ``m``);
* ``fit_nested_vs_fresh``: the ridge fit at size ``m`` from the cached nested Cholesky factor
  (what the adaptive rule pays per try) vs a fresh factorisation (``fit_coefficients``);
* ``eval_merged_vs_sum``: evaluating :math:`f_T` at 10k points from the merged coefficients vs
  summing the ``T`` stored steps one by one (what an unmerged iterate would cost; it grows
  linearly in ``T``).

Usage: ``uv run python packages/adaptive-fgd/benchmarks/bench_step.py [--quick] --out F``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from adaptive_fgd import AdaptiveFGD, KernelCentres, NestedRidge, RandomFourierFeatures
from adaptive_fgd.representations import fit_coefficients
from shared_core.bench import compare, markdown_table, write_json


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="m = 128, T = 20, fewer repeats")
    ap.add_argument("--out", type=Path, default=Path("bench_step.json"))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    n, m = 10_000, (128 if args.quick else 256)
    steps = 20 if args.quick else 50
    repeats = 5 if args.quick else 10
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 2 - 1
    y = torch.sin(4 * x[:, :1]) * torch.cos(3 * x[:, 1:])
    kw = {"adaptive": False, "start_size": m, "delta": 0.3}
    fk = AdaptiveFGD(KernelCentres(2, 0.15, cap=m), **kw).fit(x, y, steps=1)
    fr = AdaptiveFGD(RandomFourierFeatures(2, 0.15, cap=m), **kw).fit(x, y, steps=1)
    params = {"n": n, "m": m, "dtype": "float64", "threads": args.threads}
    results = [
        compare(
            fk.step,
            fr.step,
            name=f"step_kernel_vs_rff_n{n}_m{m}",
            warmup=1,
            repeats=repeats,
            threads=args.threads,
            params=params,
        )
    ]
    # nested fit vs fresh factorisation, on the 80% fit part
    phi = fk.family.features(x[: 4 * n // 5])
    g = torch.randn(phi.shape[0], 1, generator=gen, dtype=torch.float64)
    nr = NestedRidge(1e-8)
    nr.extend(phi)
    results.append(
        compare(
            lambda: nr.solve(m, g),
            lambda: fit_coefficients(phi, g, 1e-8),
            name=f"fit_nested_vs_fresh_m{m}",
            warmup=1,
            repeats=repeats,
            threads=args.threads,
            params=params,
        )
    )
    # merged iterate vs sum of T stored steps (each step keeps its own coefficients)
    fam = RandomFourierFeatures(2, 0.15, cap=m)
    fgd = AdaptiveFGD(fam, delta=0.3, start_size=8, on_cap="record").fit(x, y, steps=0)
    stored = []
    for _ in range(steps):
        before = fgd.coefficients.clone()
        fgd.step()
        after = fgd.coefficients
        stored.append(
            (
                after.shape[0],
                after - torch.cat([before, after.new_zeros(after.shape[0] - before.shape[0], 1)]),
            )
        )
    xe = torch.rand(n, 2, generator=gen, dtype=torch.float64)

    def unmerged():
        return sum(fam.features(xe, k) @ d[:k] for k, d in stored)

    torch.testing.assert_close(unmerged(), fgd.predict(xe))  # same function, two routes
    results.append(
        compare(
            lambda: fgd.predict(xe),
            unmerged,
            name=f"eval_merged_vs_sum_T{steps}",
            warmup=1,
            repeats=repeats,
            threads=args.threads,
            params={**params, "T": steps, "size": fgd.size},
        )
    )
    write_json(
        args.out,
        results,
        command="python packages/adaptive-fgd/benchmarks/bench_step.py"
        + (" --quick" if args.quick else ""),
    )
    print(markdown_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
