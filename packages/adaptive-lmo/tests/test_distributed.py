"""Two gloo processes with DDP against the single-process run on the full batch."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import _dist_worker as W
import pytest
import torch

HERE = pathlib.Path(__file__).parent
pytestmark = pytest.mark.distributed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_two_ranks_agree_with_single_process(tmp_path):
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
            logs.append(p.communicate(timeout=400)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("distributed workers hung")
    assert [p.returncode for p in procs] == [0, 0], logs
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    model = W.make_model()
    opt = W.opt_for(model)
    W.train(model, opt, W.batches())
    assert r0["geometry"] == r1["geometry"]
    for a, b, c in zip(r0["params"], r1["params"], model.parameters(), strict=True):
        assert torch.equal(a, b)  # both replicas hold the same weights
        torch.testing.assert_close(a, c.detach(), rtol=1e-10, atol=1e-12)
    for name, g in opt.geometry().items():
        ddp_name = f"module.{name}"
        assert r0["geometry"][ddp_name]["exponent"] == pytest.approx(g["exponent"], abs=1e-9)
        assert r0["geometry"][ddp_name]["source"].startswith("criterion")
