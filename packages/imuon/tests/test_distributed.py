"""Two gloo processes with DDP take the same IMuon step, equal to the single-process run."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import socket
import subprocess
import sys

import pytest
import torch

HERE = pathlib.Path(__file__).parent
_spec = importlib.util.spec_from_file_location("_imuon_dist_worker", HERE / "_dist_worker.py")
W = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(W)

pytestmark = pytest.mark.distributed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_ranks_agree_and_match_single_process(tmp_path):
    port = _free_port()
    procs = []
    for rank in range(2):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(HERE / "_dist_worker.py"), str(tmp_path)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=120)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("distributed workers hung")
    assert [p.returncode for p in procs] == [0, 0], logs
    r0 = torch.load(tmp_path / "rank0.pt")
    r1 = torch.load(tmp_path / "rank1.pt")
    single = W.train(W.make_model(), slice(0, 16), ddp=False)
    start = list(W.make_model().parameters())
    for a, b, c in zip(r0, r1, single, strict=True):
        assert torch.equal(a, b)  # identical update on every rank
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)
    assert any(not torch.equal(a, s) for a, s in zip(r0, start, strict=True))
