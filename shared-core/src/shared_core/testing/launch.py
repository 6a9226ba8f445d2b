"""Start a few local worker processes the way ``torchrun`` would, for multi-process tests.

Every package that ships a distributed code path tests it the same way: N processes on
loopback, each told its rank through the environment variables ``torchrun`` sets, running a
worker script (or ``python -m module``), then the test compares what the ranks wrote with a
single-process reference. :func:`launch_local` is that launcher, so each test only says what to
run and what to check.

Example:
    >>> import sys
    >>> from shared_core.testing import launch_local
    >>> code = "import os; print(os.environ['RANK'], os.environ['WORLD_SIZE'])"
    >>> run = launch_local([sys.executable, "-c", code], world_size=2)
    >>> run.codes, [log.split() for log in run.logs]
    ([0, 0], [['0', '2'], ['1', '2']])
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence

__all__ = ["LaunchResult", "WorkersHungError", "free_port", "launch_local"]


class WorkersHungError(TimeoutError):
    """The workers did not all exit within the launcher's time limit (they were killed)."""

    def __init__(self, message: str, logs: list[str]):
        super().__init__(message)
        self.logs = logs


@dataclasses.dataclass(frozen=True)
class LaunchResult:
    """Exit codes and combined stdout+stderr of each rank, in rank order."""

    codes: list[int]
    logs: list[str]

    @property
    def ok(self) -> bool:
        return all(code == 0 for code in self.codes)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it; another process may still race)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def rank_environment(rank: int, world_size: int, port: int, host: str = "127.0.0.1") -> dict:
    """The variables ``torchrun --nproc-per-node world_size`` sets for one local rank."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": host,
        "MASTER_PORT": str(port),
    }


def launch_local(
    command: Sequence[str],
    world_size: int = 2,
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
    threads_per_rank: int = 1,
    cwd: str | os.PathLike | None = None,
) -> LaunchResult:
    """Run ``command`` as ``world_size`` ranks on loopback and wait for all of them.

    Args:
        command: the argv every rank runs (e.g. ``[sys.executable, "worker.py", out_dir]``).
        world_size: number of processes.
        env: extra environment variables, on top of the current environment.
        timeout_s: wall-clock limit for the whole group; on expiry every rank is killed and
            :class:`WorkersHungError` is raised with the output collected so far.
        threads_per_rank: ``OMP_NUM_THREADS`` for each rank (one thread each keeps N ranks
            from oversubscribing a small machine, and makes CPU results reproducible).
        cwd: working directory of the ranks.

    Returns:
        :class:`LaunchResult` with each rank's exit code and output, in rank order.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    port = free_port()
    base = {**os.environ, **(env or {}), "OMP_NUM_THREADS": str(threads_per_rank)}
    procs = [
        subprocess.Popen(
            list(command),
            env={**base, **rank_environment(rank, world_size, port)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
        )
        for rank in range(world_size)
    ]
    logs: list[str] = []
    try:
        # One shared deadline: a rank that waits on a dead peer must not extend the limit.
        deadline = time.monotonic() + timeout_s
        for p in procs:
            logs.append(p.communicate(timeout=max(deadline - time.monotonic(), 0.1))[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        partial = logs + [p.communicate()[0] or "" for p in procs[len(logs) :]]
        raise WorkersHungError(
            f"{world_size} workers did not exit within {timeout_s:g} s: {list(command)}", partial
        ) from None
    return LaunchResult(codes=[p.returncode for p in procs], logs=logs)
