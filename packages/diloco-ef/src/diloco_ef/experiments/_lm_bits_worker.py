"""One rank of an lm-bits configuration trained by real worker processes (gloo).

Launched ``cfg.workers`` times by :func:`diloco_ef.experiments.lm_bits.run_as_processes` with
torchrun's environment variables; argv: a JSON spec (``config``, ``method``, ``seed``) and the
path rank 0 writes its record to. Every rank builds the same data as the simulation and trains
as the worker whose id is its rank; bytes are summed and alpha averaged over the ranks.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

import torch
import torch.distributed as dist

from ..comm import TorchDistCommunicator, init_distributed
from .lm_bits import Config, Method, make_data, run_method


def _tuples(v):
    # JSON turns the config's tuples into lists; the frozen dataclass wants them hashable.
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def main(argv: Sequence[str] | None = None) -> int:
    spec_path, out_path = sys.argv[1:] if argv is None else argv
    with open(spec_path) as f:
        spec = json.load(f)
    cfg = Config(**{k: _tuples(v) for k, v in spec["config"].items()})
    method = Method(**spec["method"])
    torch.set_num_threads(1)
    init_distributed("gloo", timeout_s=120.0)
    try:
        comm = TorchDistCommunicator()
        if comm.world_size != cfg.workers:
            raise ValueError(f"launched {comm.world_size} ranks for {cfg.workers} workers")
        rec = run_method(method, cfg, make_data(cfg, spec["seed"]), spec["seed"], comm)
        totals = torch.tensor([rec["bytes"], rec["alpha"]], dtype=torch.float64)
        dist.all_reduce(totals)
        rec.update(
            bytes=float(totals[0]),
            alpha=float(totals[1]) / comm.world_size,
            world_size=comm.world_size,
        )
        if dist.get_rank() == 0:
            with open(out_path, "w") as f:
                json.dump(rec, f)
        dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    # Every rank is past the barrier and the record is on disk. Leave without tearing the gloo
    # group down: its teardown can abort a rank whose peers have already exited ("terminate
    # called without an active exception"), which would report a finished run as failed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
