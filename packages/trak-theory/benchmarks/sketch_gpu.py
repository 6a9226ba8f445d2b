"""The on-the-fly sketch vs a materialised projection (GPU benchmark; CPU runs a small smoke).

On CUDA: ``sketch_project_triton`` (S hashed in registers, never stored) against the
materialising baseline that generates S block by block in HBM with ``torch`` and multiplies
(a 10M x 4096 float32 matrix is 164 GB and cannot be held whole on one H200), for n = 64
gradients of p = 10M parameters, k = 4096, and against traker's ``BasicProjector`` (its GPU
path without the compiled ``fast_jl`` extension) at its default and at its largest feasible
block when traker is importable. On the CPU (no Triton speed to measure) it times
the blockwise torch reference against a cached-matrix matmul at small sizes, as a smoke test.

    python packages/trak-theory/benchmarks/sketch_gpu.py --device cuda \
        --out packages/trak-theory/benchmarks/results/sketch_gpu.json      # pending: no GPU yet
"""

from __future__ import annotations

import argparse
import sys

import torch

from shared_core.bench import compare, write_json
from trak_theory.kernels import sketch_block_reference, sketch_project_reference


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--out", default="sketch_gpu.json")
    args = ap.parse_args(argv)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda asked for, but no CUDA device is present")
        from trak_theory.kernels import sketch_project_triton

        p, k, n = (1_000_000, 1024, 64) if args.quick else (10_000_000, 4096, 64)
        g = torch.randn(n, p, device="cuda")
        block = 262_144

        def materialised():
            out = torch.zeros(n, k, device="cuda")
            gen = torch.Generator(device="cuda").manual_seed(0)
            for r0 in range(0, p, block):
                r1 = min(p, r0 + block)
                s = (
                    torch.randint(
                        0, 2, (r1 - r0, k), device="cuda", generator=gen, dtype=torch.float32
                    )
                    .mul_(2)
                    .sub_(1)
                )
                out.addmm_(g[:, r0:r1], s)
            return out

        r = compare(
            lambda: sketch_project_triton(g, 0, k, "rademacher"),
            materialised,
            name="triton sketch vs materialised",
            device="cuda",
            warmup=2,
            repeats=5,
            params={"n": n, "p": p, "k": k},
        )
        results = [r]
        # traker's own GPU projector without its compiled extension (fast_jl): BasicProjector
        # regenerates S block by block. Its default block (100 columns) and the largest block
        # that fits beside the gradients (1024 columns: a 41 GB block at p = 10M).
        try:
            from trak.projectors import BasicProjector, ProjectionType
        except ImportError:
            print("traker not importable: its projector is not timed (carry its wheel)")
        else:
            for cols in (100, 1024):
                proj = BasicProjector(
                    grad_dim=p,
                    proj_dim=k,
                    seed=0,
                    proj_type=ProjectionType.rademacher,
                    device=torch.device("cuda"),
                    block_size=cols,
                )
                results.append(
                    compare(
                        lambda: sketch_project_triton(g, 0, k, "rademacher"),
                        lambda proj=proj: proj.project(g, model_id=0),
                        name=f"triton sketch vs traker BasicProjector(block_size={cols})",
                        device="cuda",
                        warmup=1,
                        repeats=4,
                        params={"n": n, "p": p, "k": k, "traker_block_size": cols},
                    )
                )
                del proj
                torch.cuda.empty_cache()
    else:
        p, k, n = (20_000, 256, 64) if args.quick else (100_000, 512, 64)
        g = torch.randn(n, p)
        mat = sketch_block_reference(0, 0, p, k) / k**0.5
        r = compare(
            lambda: sketch_project_reference(g, 0, k),
            lambda: g @ mat,
            name="blockwise reference vs cached matrix (CPU smoke)",
            warmup=1,
            repeats=3,
            params={"n": n, "p": p, "k": k},
        )
        results = [r]
    for r in results:
        print(f"{r.name}: ratio median {r.ratio_median:.3f} [{r.ratio_min:.3f}, {r.ratio_max:.3f}]")
    write_json(args.out, results, device=args.device, command=" ".join([sys.executable, *sys.argv]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
