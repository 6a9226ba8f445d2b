"""Two gloo processes with DDP against the single-process run on the full batch."""

from __future__ import annotations

import pathlib
import sys

import _dist_worker as W
import pytest
import torch

from shared_core.testing import launch_local

HERE = pathlib.Path(__file__).parent
pytestmark = pytest.mark.distributed


def test_ddp_two_ranks_agree_with_single_process(tmp_path):
    command = [sys.executable, str(HERE / "_dist_worker.py"), str(tmp_path)]
    run = launch_local(command, timeout_s=400)
    assert run.codes == [0, 0], run.logs
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
