"""One DDP rank of the conformance battery: ``python _ddp_worker.py OUT_DIR NAME [NAME ...]``.

RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the environment (as torchrun sets
them). For each named optimizer: the battery's MLP under DistributedDataParallel, each rank on
its share of the batch, 5 steps; rank 0 writes every rank's final parameters to
``OUT_DIR/rank0.json``. The per-rank loss is the rank's sum of squared errors times
``world / N``, so DDP's gradient average is exactly the full-batch mean-squared-error gradient
even though the ranks hold different numbers of rows.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

HERE = pathlib.Path(__file__).parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


O = _load("_optimizers")
P = _load("_battery_problems")


class MLP(torch.nn.Module):
    def __init__(self, starts: list[torch.Tensor]):
        super().__init__()
        self.ps = torch.nn.ParameterList([torch.nn.Parameter(s.clone()) for s in starts])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return P.mlp_forward(list(self.ps), x)


def main(out: pathlib.Path, names: list[str]) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    problem = P.make("mlp", seed=6)
    x, y = problem.data["X"], problem.data["Y"]
    n = x.shape[0]
    rows = torch.arange(n)[rank::world]
    results = {}
    for name in names:
        case = O.by_name(name)
        module = MLP(problem.starts)
        model = DistributedDataParallel(module)
        opt = case.make(list(module.parameters()), case.lr["mlp"])
        for _ in range(5):
            opt.zero_grad()
            loss = (model(x[rows]) - y[rows]).pow(2).sum() * (world / n)
            loss.backward()
            opt.step()
        flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(gathered, flat)
        results[name] = {"ranks": [g.tolist() for g in gathered]}
    if rank == 0:
        (out / "rank0.json").write_text(json.dumps(results))
    # Both ranks reach teardown together: a rank that destroys its process group while the
    # other still holds gloo connections can abort at exit ("terminate called without an
    # active exception", seen once in CI).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]), sys.argv[2:])
    # The results are on disk and the group is destroyed: leave without running C++ static
    # destructors, where gloo's teardown can still abort a healthy run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
