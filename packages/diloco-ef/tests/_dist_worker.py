"""One DiLoCo worker process, configured by torchrun's environment variables.

Modes: agree, shapes, dead (rank 1 exits), stall (rank 1 stays alive but silent), and all
(agree, shapes, dead in turn).

Run by test_distributed.py as ``python _dist_worker.py MODE OUT_DIR`` with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set (exactly what ``torchrun`` sets), so the same file also runs as
``torchrun --nproc-per-node 2 _dist_worker.py all /tmp/out``.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
import traceback

import torch
import torch.distributed as dist

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import _problems as P

from diloco_ef import (
    QSGD,
    DiLoCo,
    LowRank,
    PeerFailureError,
    PowerSGD,
    RandomK,
    ScaledSign,
    SharedScaleQuant,
    TopK,
    TorchDistCommunicator,
    init_distributed,
)

CONFIGS = {
    "plain": None,
    "topk": lambda: TopK(ratio=0.3),
    "randomk": lambda: RandomK(ratio=0.3),
    "qsgd": lambda: QSGD(bits=3, contractive=True),
    # one MAX all-reduce of the scales, one int64 all-reduce of packed level sums
    "shared4": lambda: SharedScaleQuant(bits=4),
    # all-gathers two factors per matrix and the biases' signs and scales; warm-started per rank
    "lowrank": lambda: LowRank(rank=1, fallback=ScaledSign()),
    # PowerSGD: two all-reduces (P and the biases, then Q), Q shared and warm-started
    "powersgd": lambda: PowerSGD(rank=1),
}
ROUNDS, H = 3, 3


def make_algo(model, comm, compressor):
    return DiLoCo(
        model,
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
        lambda p: torch.optim.SGD(p, lr=0.7, momentum=0.9, nesterov=True),
        inner_steps=H,
        communicator=comm,
        compressor=compressor,
    )


def main(mode: str, out: pathlib.Path) -> None:
    torch.set_num_threads(1)
    init_distributed("gloo", timeout_s=float(os.environ.get("DILOCO_TEST_TIMEOUT", "20")))
    comm = TorchDistCommunicator()
    # "all" runs the three scenarios in one process group: process start-up dominates the cost.
    modes = ("agree", "shapes", "dead") if mode == "all" else (mode,)
    for m in modes:
        scenario(m, comm, out)
    if modes[-1] in ("dead", "stall"):
        # The group lost a peer: tearing it down can abort inside gloo's C++ threads
        # ("terminate called without an active exception"), which is not what is under test.
        # The result file is written; leave without the teardown.
        sys.stdout.flush()
        os._exit(0)
    dist.destroy_process_group()


def scenario(mode: str, comm: TorchDistCommunicator, out: pathlib.Path) -> None:
    rank = comm.rank
    if mode == "agree":
        results = {}
        for name, make in CONFIGS.items():
            algo = make_algo(P.make_model(), comm, make() if make else None)
            for _ in range(ROUNDS):
                algo.round(P.loss_fn)
            results[name] = {
                "params": [p.detach().clone() for p in algo.model.parameters()],
                "history": algo.history,
            }
        torch.save(results, out / f"rank{rank}.pt")
    elif mode == "shapes":
        model = P.make_model() if rank == 0 else torch.nn.Linear(6, 3).double()
        try:
            make_algo(model, comm, None)
        except ValueError as err:
            (out / f"shapes{rank}.txt").write_text(str(err))
    elif mode in ("dead", "stall"):
        algo = make_algo(P.make_model(), comm, TopK(ratio=0.3))
        if rank == 1:
            if mode == "stall":  # alive, connections open, but never joins the collective
                time.sleep(float(os.environ["DILOCO_TEST_TIMEOUT"]) + 5)
            os._exit(3)  # a worker dies between rounds
        t0 = time.monotonic()
        try:
            algo.round(P.loss_fn)
            msg = "no error"
        except PeerFailureError as err:
            msg = f"PeerFailureError: {err}"
        except Exception:
            msg = "other: " + traceback.format_exc()
        (out / f"{mode}{rank}.txt").write_text(f"{time.monotonic() - t0:.3f}\n{msg}")


if __name__ == "__main__":
    main(sys.argv[1], pathlib.Path(sys.argv[2]))
