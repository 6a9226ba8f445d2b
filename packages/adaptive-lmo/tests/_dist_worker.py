"""One DDP worker: AdaptiveLMO (exponent "auto") on its half of each global batch.

Run by test_distributed.py as ``python _dist_worker.py OUT_DIR`` with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set (what ``torchrun`` sets).
"""

from __future__ import annotations

import os
import pathlib
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from adaptive_lmo import AdaptiveLMO

STEPS, BATCH = 5, 24


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(5, 9), nn.Tanh(), nn.Linear(9, 7), nn.Tanh(), nn.Linear(7, 2)
    ).double()


def batches():
    g = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(BATCH, 5, generator=g, dtype=torch.float64),
            torch.randn(BATCH, 2, generator=g, dtype=torch.float64),
        )
        for _ in range(STEPS)
    ]


def opt_for(model: nn.Module) -> AdaptiveLMO:
    return AdaptiveLMO(model, lr=0.05, update_every=2, max_rows=10_000)


def train(model, opt, data, rank=0, world=1):
    for x, y in data:
        h = BATCH // world
        opt.zero_grad()
        F.mse_loss(model(x[rank * h : (rank + 1) * h]), y[rank * h : (rank + 1) * h]).backward()
        opt.step()


def main(out: pathlib.Path) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model()
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = opt_for(ddp)
    train(ddp, opt, batches(), rank, world)
    torch.save(
        {"params": [p.detach().clone() for p in model.parameters()], "geometry": opt.geometry()},
        out / f"rank{rank}.pt",
    )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(pathlib.Path(sys.argv[1]))
