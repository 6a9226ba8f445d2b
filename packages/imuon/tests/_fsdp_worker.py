"""Worker for test_distributed.py: the DDP test's model under FSDP2 (fully_shard) over gloo.

Every parameter becomes a DTensor sharded on dim 0 (uneven shards: 6 rows -> 3 + 3, a rank-2
factor of 8 rows -> 4 + 4, the 3-column Stiefel frame of 6 rows -> 3 + 3, the head's 2 rows ->
1 + 1). Each rank trains on its half of every batch; FSDP reduce-scatters the mean gradient.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, os.path.dirname(__file__))
import _dist_worker as W

from imuon import IMuon, tag
from imuon.lora import imuon_param_groups


def main() -> int:
    out = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    per = 16 // world
    model = W.make_model()
    # FSDP2 shards only contiguous parameters; QR's frame is column-major.
    model.frame = torch.nn.Parameter(model.frame.detach().contiguous())
    net = W.Wrapped(model)
    fully_shard(net)
    assert all(type(p).__name__ == "DTensor" for p in model.parameters())
    tag(model.frame, "stiefel")  # sharding replaced the Parameter objects: tag the new one
    opt = IMuon(imuon_param_groups(model, lr=0.05), lr=0.05)
    xs, ys = W.data()
    shard = slice(rank * per, (rank + 1) * per)
    for t in range(W.STEPS):
        opt.zero_grad()
        loss = (net(xs[t][shard]) - ys[t][shard]).pow(2).mean()
        loss.backward()
        opt.step()
    params = [p.full_tensor().detach().clone() for p in model.parameters()]
    local = [p.to_local().detach().clone() for p in model.parameters()]
    state = opt.state_dict()["state"]
    torch.save({"params": params, "local": local, "state": state}, f"{out}/fsdp{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
