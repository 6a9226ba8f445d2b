r"""Train a small MLP with data-parallel SGD, DiLoCo or DiLoCo-EF; one process per worker.

.. code-block:: bash

    torchrun --nproc-per-node 4 -m diloco_ef.train --algo diloco-ef --compressor topk \
        --ratio 0.01 --steps 512 --inner-steps 32 --out run.json
    diloco-ef-train --workers 4 --algo ddp            # no torchrun: 4 workers in one process

Every worker holds a shard of a regression task generated from ``--seed`` and its rank: inputs
:math:`x \sim N(0, I)`, targets :math:`y = f^\star(x) + 0.1\,\xi` from a fixed random teacher MLP
:math:`f^\star`, mean squared error. The algorithms all run through :class:`~diloco_ef.DiLoCo`:

- ``ddp``: :math:`H = 1`, inner SGD with step 1 (so the pseudo-gradient is the gradient) and the
  outer optimizer SGD(``--lr``, ``--momentum``): one dense all-reduce per step, i.e. synchronous
  data-parallel SGD with momentum, what DDP computes;
- ``diloco``: :math:`H` = ``--inner-steps`` inner SGD(``--inner-lr``) steps, outer Nesterov
  SGD(``--outer-lr``, ``--outer-momentum``), dense average of the pseudo-gradients;
- ``diloco-ef``: the same with ``--compressor`` and per-worker error feedback.

All runs see ``--steps`` inner steps per worker, so they use the same samples. Under torchrun
the backend is gloo on CPU and NCCL on GPU (``--device``). The final loss is the mean squared
error of the final (averaged) model on a held-out set shared by all workers; ``bytes`` is the
total every worker sent (the package's bit accounting, summed over workers, / 8). Rank 0 prints
one line and writes ``--out`` as JSON. ``wire_bytes_sent_per_rank`` is what the communicator's
meter counted for one rank over the rounds (packed payloads and the per-round finiteness flags,
the traffic of the collectives used; the same on every rank).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ._rng import derive_seed
from .algorithms import DiLoCo
from .comm import LocalCommunicator, TorchDistCommunicator, init_distributed
from .compressors import (
    QSGD,
    AbsmaxQuant,
    ApproxTopK,
    Compressor,
    Int8Absmax,
    RandomK,
    ScaledSign,
    TopK,
)
from .powersgd import PowerSGD
from .shared_scale import SharedScaleQuant

__all__ = ["main", "make_compressor", "make_task", "parse_args", "train"]

ALGOS = ("ddp", "diloco", "diloco-ef")
COMPRESSORS = (
    "topk",
    "approx-topk",
    "randomk",
    "qsgd",
    "int8",
    "absmax",
    "shared",
    "sign",
    "powersgd",
)
NOISE = 0.1


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="diloco-ef-train", description=__doc__.split("\n\n")[0])
    p.add_argument("--algo", choices=ALGOS, default="diloco-ef")
    p.add_argument("--compressor", choices=COMPRESSORS, default="topk")
    p.add_argument("--ratio", type=float, default=0.01, help="kept fraction (top-k, random-k)")
    p.add_argument("--bits", type=int, default=2, help="QSGD magnitude bits; absmax bits (2-8)")
    p.add_argument("--rank", type=int, default=1, help="PowerSGD rank")
    p.add_argument("--steps", type=int, default=256, help="inner steps per worker")
    p.add_argument("--inner-steps", type=int, default=16, help="H for diloco / diloco-ef")
    p.add_argument("--lr", type=float, default=0.05, help="ddp step size")
    p.add_argument("--momentum", type=float, default=0.9, help="ddp momentum")
    p.add_argument("--inner-lr", type=float, default=0.05)
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--batch", type=int, default=32, help="per-worker batch")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--samples", type=int, default=2048, help="training samples per worker")
    p.add_argument("--workers", type=int, default=1, help="simulated workers without torchrun")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--timeout", type=float, default=60.0, help="collective timeout in seconds")
    p.add_argument("--out", type=Path, default=None, help="JSON file written by rank 0")
    a = p.parse_args(argv)
    for name in ("steps", "inner_steps", "batch", "dim", "hidden", "samples", "workers", "rank"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.algo != "ddp" and a.steps % a.inner_steps:
        p.error(f"--steps ({a.steps}) must be a multiple of --inner-steps ({a.inner_steps})")
    if not 0 < a.ratio <= 1:
        p.error(f"--ratio must lie in (0, 1], got {a.ratio}")
    if a.compressor in ("absmax", "shared") and not 2 <= a.bits <= 8:
        p.error(f"--bits must lie in [2, 8] for absmax, got {a.bits}")
    return a


def make_compressor(args: argparse.Namespace) -> Compressor | None:
    """The compressor of ``--algo diloco-ef``; None for the dense algorithms."""
    if args.algo != "diloco-ef":
        return None
    return {
        "topk": lambda: TopK(ratio=args.ratio),
        "approx-topk": lambda: ApproxTopK(ratio=args.ratio),
        "randomk": lambda: RandomK(ratio=args.ratio),
        "qsgd": lambda: QSGD(bits=args.bits, contractive=True),
        "int8": lambda: Int8Absmax(),
        "absmax": lambda: AbsmaxQuant(bits=args.bits),
        "shared": lambda: SharedScaleQuant(bits=args.bits),
        "sign": lambda: ScaledSign(),
        "powersgd": lambda: PowerSGD(rank=args.rank),
    }[args.compressor]()


def _mlp(dim: int, hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, 1))


def make_task(args: argparse.Namespace, worker: int) -> dict[str, Tensor]:
    """The teacher's data: this worker's training shard and the shared held-out set."""
    torch.manual_seed(derive_seed(args.seed, 11))
    teacher = _mlp(args.dim, args.hidden)
    g = torch.Generator().manual_seed(derive_seed(args.seed, 12, worker))
    x = torch.randn(args.samples, args.dim, generator=g)
    gt = torch.Generator().manual_seed(derive_seed(args.seed, 13))
    xt = torch.randn(4096, args.dim, generator=gt)
    with torch.no_grad():
        y = teacher(x) + NOISE * torch.randn(args.samples, 1, generator=g)
        yt = teacher(xt) + NOISE * torch.randn(4096, 1, generator=gt)
    return {"x": x, "y": y, "x_test": xt, "y_test": yt}


def train(args: argparse.Namespace, distributed: bool) -> dict[str, Any]:
    """Run one training; returns the record rank 0 writes (every rank gets the same)."""
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if distributed:
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(device)
        init_distributed("nccl" if device.type == "cuda" else "gloo", timeout_s=args.timeout)
        comm = TorchDistCommunicator()
    else:
        comm = LocalCommunicator(args.workers)
    world = comm.world_size
    tasks = {w: make_task(args, w) for w in comm.worker_ids}
    tasks = {w: {k: v.to(device) for k, v in t.items()} for w, t in tasks.items()}
    torch.manual_seed(derive_seed(args.seed, 14))
    model = _mlp(args.dim, args.hidden).to(device)
    if args.algo == "ddp":
        h, rounds = 1, args.steps

        def inner(p: list[Tensor]) -> torch.optim.Optimizer:
            return torch.optim.SGD(p, lr=1.0)

        def outer(p: list[Tensor]) -> torch.optim.Optimizer:
            return torch.optim.SGD(p, lr=args.lr, momentum=args.momentum)
    else:
        h, rounds = args.inner_steps, args.steps // args.inner_steps

        def inner(p: list[Tensor]) -> torch.optim.Optimizer:
            return torch.optim.SGD(p, lr=args.inner_lr)

        def outer(p: list[Tensor]) -> torch.optim.Optimizer:
            return torch.optim.SGD(p, lr=args.outer_lr, momentum=args.outer_momentum, nesterov=True)

    algo = DiLoCo(
        model,
        inner,
        outer,
        inner_steps=h,
        communicator=comm,
        compressor=make_compressor(args),
        seed=args.seed,
    )
    draws = {
        w: torch.Generator().manual_seed(derive_seed(args.seed, 15, w)) for w in comm.worker_ids
    }

    def loss_fn(m: nn.Module, w: int, r: int, step: int) -> Tensor:
        idx = torch.randint(args.samples, (args.batch,), generator=draws[w]).to(device)
        t = tasks[w]
        return nn.functional.mse_loss(m(t["x"][idx]), t["y"][idx])

    t0 = time.perf_counter()
    for _ in range(rounds):
        algo.round(loss_fn)
    seconds = time.perf_counter() - t0
    bits = torch.tensor([float(sum(r["bits"] for r in algo.history))], dtype=torch.float64)
    train_loss = torch.tensor([algo.history[-1]["loss"]], dtype=torch.float64)
    if distributed:
        # Totals over all ranks; float64 on the CPU works for gloo, NCCL needs the device.
        bits, train_loss = bits.to(device), train_loss.to(device)
        dist.all_reduce(bits)
        dist.all_reduce(train_loss)
        train_loss /= world
    t = next(iter(tasks.values()))
    with torch.no_grad():
        final = float(nn.functional.mse_loss(algo.model(t["x_test"]), t["y_test"]))
    alphas = [r["alpha"] for r in algo.history]
    rec = {
        "algo": args.algo,
        "compressor": args.compressor if args.algo == "diloco-ef" else None,
        "ratio": args.ratio if args.algo == "diloco-ef" else None,
        "bits_per_coord": args.bits if args.algo == "diloco-ef" else None,
        "world_size": world,
        "distributed": distributed,
        "backend": dist.get_backend() if distributed else None,
        "device": str(device),
        "steps": args.steps,
        "inner_steps": h,
        "rounds": rounds,
        "final_loss": final,
        "final_train_loss": float(train_loss.item()),
        "noise_floor": NOISE**2,
        "bytes": float(bits.item()) / 8.0,
        "wire_bytes_handed_per_rank": sum(r["bytes_handed"] for r in algo.history),
        "wire_bytes_sent_per_rank": sum(r["bytes_sent"] for r in algo.history),
        "mean_alpha": sum(alphas) / len(alphas),
        "seconds": seconds,
        "params": sum(p.numel() for p in model.parameters()),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    if not math.isfinite(final):
        raise FloatingPointError(f"training diverged: final loss {final}")
    return rec


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    distributed = "WORLD_SIZE" in os.environ and "RANK" in os.environ
    try:
        rec = train(args, distributed)
        rank = dist.get_rank() if distributed else 0
        if rank == 0:
            print(
                f"{rec['algo']}{'/' + rec['compressor'] if rec['compressor'] else ''} "
                f"workers={rec['world_size']} final_loss={rec['final_loss']:.6f} "
                f"bytes={rec['bytes']:.0f} "
                f"wire_sent_per_rank={rec['wire_bytes_sent_per_rank']:.0f} "
                f"({rec['seconds']:.1f} s)",
                flush=True,
            )
            if args.out is not None:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(rec, indent=2))
    finally:
        if distributed and dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
