"""One rank of the start-up agreement scenarios (run by test_agreement.py, 3 ranks, gloo).

Each scenario builds its model *without a common seed* (``torch.seed()``: a fresh random seed
per process), as a user following the README's multi-process recipe would. Writes
``rank<r>.pt`` with what the test checks. Also runs as ``torchrun --nproc-per-node 3
_agree_worker.py OUT_DIR``.
"""

from __future__ import annotations

import math
import os
import pathlib
import sys

import torch
import torch.distributed as dist

from diloco_ef import (
    DiLoCo,
    DiLoCoHook,
    RandomK,
    TopK,
    TorchDistCommunicator,
    init_distributed,
    local_step_size_schedule,
)

H, T = 8, 4


def readme_model() -> torch.nn.Module:
    torch.seed()  # a different random initialisation in every process
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def make_loss():
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(3, 256, 16, generator=g), torch.randn(3, 256, 1, generator=g)

    def loss_fn(model, worker, rnd, step):
        i = torch.randint(0, 256, (32,), generator=torch.Generator().manual_seed(rnd * H + step))
        return ((model(X[worker, i]) - Y[worker, i]) ** 2).mean()

    return loss_fn


def make_algo(comm, model=None, **kw):
    kw.setdefault("compressor", TopK(ratio=0.1))
    kw.setdefault("inner_steps", H)
    return DiLoCo(
        model if model is not None else readme_model(),
        lambda p: torch.optim.SGD(p, lr=0.1),
        lambda p: torch.optim.SGD(p, lr=0.7, momentum=0.9, nesterov=True),
        communicator=comm,
        inner_lr=local_step_size_schedule(c=4.0, inner_steps=kw["inner_steps"], total_rounds=T),
        **kw,
    )


def params(model):
    return [p.detach().clone() for p in model.parameters()]


def error_of(fn):
    try:
        fn()
    except Exception as err:  # the test reads the type and message
        return f"{type(err).__name__}: {err}"
    return "no error"


def main(out: pathlib.Path) -> None:
    torch.set_num_threads(1)
    init_distributed("gloo", timeout_s=float(os.environ.get("DILOCO_TEST_TIMEOUT", "20")))
    comm = TorchDistCommunicator()
    rank, res = comm.rank, {}
    loss_fn = make_loss()

    # 1. The README recipe, unseeded: replicas start different and must end identical.
    model = readme_model()
    res["init"] = params(model)
    algo = make_algo(comm, model)
    res["after_construction"] = params(algo.model)
    for _ in range(T):
        algo.round(loss_fn)
    res["final"] = params(algo.model)
    res["traffic"] = [{k: h[k] for k in h if k.startswith("bytes_")} for h in algo.history]

    # 2. Settings that must agree: one rank differs in one field.
    res["inner_steps"] = error_of(lambda: make_algo(comm, inner_steps=4 if rank == 2 else H))
    res["seed"] = error_of(lambda: make_algo(comm, compressor=RandomK(ratio=0.3), seed=rank))
    res["compressor"] = error_of(lambda: make_algo(comm, compressor=TopK(ratio=0.1 * (1 + rank))))

    # 3. A NaN loss on rank 1 in round 1: every rank skips (or raises) together.
    def poisoned(model, worker, rnd, step):
        loss = loss_fn(model, worker, rnd, step)
        return loss * math.nan if (worker, rnd, step) == (1, 1, 3) else loss

    algo = make_algo(comm, on_nonfinite="skip")
    for _ in range(3):
        algo.round(poisoned)
    res["skipped"] = [h["skipped"] for h in algo.history]
    res["skip_final"] = params(algo.model)
    # ... or all retry round 1 with half the inner lr (a transient fault on rank 1 only).
    hits = [0]

    def transient(model, worker, rnd, step):
        if (worker, rnd, step) == (1, 1, 3) and hits[0] == 0:
            hits[0] += 1
            return loss_fn(model, worker, rnd, step) * math.nan
        return loss_fn(model, worker, rnd, step)

    algo = make_algo(comm, on_nonfinite="retry")
    for _ in range(3):
        algo.round(transient)
    res["retries"] = [h["retries"] for h in algo.history]
    res["retry_final"] = params(algo.model)
    algo = make_algo(comm)
    algo.round(poisoned)
    res["raise"] = error_of(lambda: algo.round(poisoned))
    res["raise_rounds_done"] = algo.rounds_done

    # 4. Resume: rank 1's checkpoint disagrees on the outer state; rank 0's wins.
    algo = make_algo(comm)
    algo.round(loss_fn)
    ckpt = algo.state_dict()
    if rank == 1:
        ckpt["outer_params"] = [x + 1.0 for x in ckpt["outer_params"]]
        for s in ckpt["outer_opt"]["state"].values():
            s["momentum_buffer"] = s["momentum_buffer"] * 3.0
    fresh = make_algo(comm)
    fresh.load_state_dict(ckpt)
    fresh.round(loss_fn)
    res["resume_final"] = params(fresh.model)
    if rank == 2:
        ckpt["rounds_done"] = 5
    res["resume_round"] = error_of(lambda: make_algo(comm).load_state_dict(ckpt))

    # 5. The hook API, driven by a plain loop on every rank, equals the round engine.
    def seeded_model():
        torch.manual_seed(11)
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))

    algo = make_algo(comm, seeded_model())
    for _ in range(T):
        algo.round(loss_fn)
    res["round_final"] = params(algo.model)
    model = seeded_model()
    opt = torch.optim.SGD(model.parameters(), lr=local_step_size_schedule(4.0, H, T)(0))
    outer = lambda p: torch.optim.SGD(p, lr=0.7, momentum=0.9, nesterov=True)  # noqa: E731
    DiLoCoHook(model, opt, outer, sync_every=H, communicator=comm, compressor=TopK(ratio=0.1))
    for r in range(T):
        for h in range(H):
            opt.zero_grad()
            loss_fn(model, rank, r, h).backward()
            opt.step()
    res["hook_final"] = params(model)

    torch.save(res, out / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
