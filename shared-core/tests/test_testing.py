"""The local multi-process launcher: environment, exit codes, logs, a real gloo collective."""

from __future__ import annotations

import sys
import time

import pytest
import torch

from shared_core.testing import LaunchResult, WorkersHungError, free_port, launch_local

ALL_REDUCE = """
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
x = torch.arange(5, dtype=torch.float64) * (rank + 1) + float(os.environ["LOCAL_RANK"])
dist.all_reduce(x)
print(" ".join(repr(v) for v in x.tolist()))
dist.destroy_process_group()
sys.exit(int(os.environ.get("EXIT_CODE_OF_RANK_" + str(rank), "0")))
"""


@pytest.mark.distributed
def test_three_ranks_run_a_gloo_all_reduce():
    run = launch_local([sys.executable, "-c", ALL_REDUCE], world_size=3, timeout_s=120)
    assert run.ok, run.logs
    # Reference: sum over ranks r of arange(5) * (r + 1) + r, computed here in one process.
    ref = sum(torch.arange(5, dtype=torch.float64) * (r + 1) + r for r in range(3))
    for log in run.logs:
        got = torch.tensor([float(v) for v in log.split()], dtype=torch.float64)
        assert torch.equal(got, ref), run.logs


@pytest.mark.distributed
def test_exit_codes_come_back_in_rank_order():
    run = launch_local(
        [sys.executable, "-c", ALL_REDUCE], world_size=2, env={"EXIT_CODE_OF_RANK_1": "7"}
    )
    assert run == LaunchResult(codes=[0, 7], logs=run.logs)
    assert not run.ok


def test_torchrun_environment_and_one_thread_per_rank():
    code = "import os; print(*[os.environ[k] for k in sys.argv[1:]])"
    keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR"]
    run = launch_local(
        [sys.executable, "-c", "import sys;" + code, *keys, "OMP_NUM_THREADS"], world_size=2
    )
    assert [log.split() for log in run.logs] == [
        ["0", "0", "2", "2", "127.0.0.1", "1"],
        ["1", "1", "2", "2", "127.0.0.1", "1"],
    ]


def test_hung_workers_are_killed_and_reported():
    sleeper = "import os, time; print('rank', os.environ['RANK'], flush=True); time.sleep(60)"
    t0 = time.monotonic()
    with pytest.raises(WorkersHungError, match="did not exit within 3 s") as info:
        launch_local([sys.executable, "-c", sleeper], world_size=2, timeout_s=3)
    assert time.monotonic() - t0 < 30  # killed, not waited out
    assert [log.strip() for log in info.value.logs] == ["rank 0", "rank 1"]


def test_bad_arguments():
    with pytest.raises(ValueError, match="world_size must be >= 1, got 0"):
        launch_local([sys.executable, "-c", "pass"], world_size=0)
    with pytest.raises(ValueError, match="timeout_s must be positive, got -1"):
        launch_local([sys.executable, "-c", "pass"], timeout_s=-1)


def test_free_port_can_be_bound():
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
