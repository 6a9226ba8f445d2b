"""Worker for test_distributed.py: DDP over gloo, IMuon on LoRA + Stiefel + plain params."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch import nn

from imuon import IMuon, tag
from imuon.lora import LoRALinear, imuon_param_groups

STEPS = 5


def make_model() -> nn.Module:
    torch.manual_seed(0)
    lora = LoRALinear(8, 6, rank=2, init_std=0.3)
    frame = nn.Parameter(torch.linalg.qr(torch.randn(6, 3))[0])
    tag(frame, "stiefel")
    model = nn.Module()
    model.lora, model.frame, model.head = lora, frame, nn.Linear(3, 2)
    return model


def forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model.head(torch.tanh(model.lora(x)) @ model.frame)


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(STEPS, 16, 8, generator=g), torch.randn(STEPS, 16, 2, generator=g)


class Wrapped(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return forward(self.model, x)


def train(model: nn.Module, shard: slice, ddp: bool) -> list[torch.Tensor]:
    net = nn.parallel.DistributedDataParallel(Wrapped(model)) if ddp else Wrapped(model)
    opt = IMuon(imuon_param_groups(model, lr=0.05), lr=0.05)
    xs, ys = data()
    for t in range(STEPS):
        opt.zero_grad()
        loss = (net(xs[t][shard]) - ys[t][shard]).pow(2).mean()
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def main() -> int:
    out = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    per = 16 // world
    params = train(make_model(), slice(rank * per, (rank + 1) * per), ddp=True)
    torch.save(params, os.path.join(out, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
