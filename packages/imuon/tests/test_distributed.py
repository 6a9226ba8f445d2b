"""Two gloo processes with DDP take the same IMuon step, equal to the single-process run."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest
import torch

from shared_core.testing import launch_local

HERE = pathlib.Path(__file__).parent
_spec = importlib.util.spec_from_file_location("_imuon_dist_worker", HERE / "_dist_worker.py")
W = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(W)

pytestmark = pytest.mark.distributed


def test_ddp_ranks_agree_and_match_single_process(tmp_path):
    run = launch_local([sys.executable, str(HERE / "_dist_worker.py"), str(tmp_path)])
    assert run.codes == [0, 0], run.logs
    r0 = torch.load(tmp_path / "rank0.pt")
    r1 = torch.load(tmp_path / "rank1.pt")
    single = W.train(W.make_model(), slice(0, 16), ddp=False)
    start = list(W.make_model().parameters())
    for a, b, c in zip(r0, r1, single, strict=True):
        assert torch.equal(a, b)  # identical update on every rank
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)
    assert any(not torch.equal(a, s) for a, s in zip(r0, start, strict=True))


def test_fsdp2_sharded_parameters_match_single_process(tmp_path):
    """FSDP2 (fully_shard): each rank gathers the matrices, takes the closed-form step, keeps its
    shard; the result equals the single-process run, and each rank's shard is its slice of it."""
    run = launch_local([sys.executable, str(HERE / "_fsdp_worker.py"), str(tmp_path)])
    assert run.codes == [0, 0], run.logs
    r0, r1 = (torch.load(tmp_path / f"fsdp{r}.pt", weights_only=False) for r in (0, 1))
    single = W.train(W.make_model(), slice(0, 16), ddp=False)
    for a, b, c in zip(r0["params"], r1["params"], single, strict=True):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)
    for full, s0, s1 in zip(r0["params"], r0["local"], r1["local"], strict=True):
        # Shard(0) as torch.chunk: rank 0 holds the first ceil(n/2) rows.
        assert torch.equal(torch.cat([s0, s1]), full)
        assert s0.shape[0] == -(-full.shape[0] // 2)
    # The state of a sharded parameter is held in full (the same on both ranks).
    for k, st in r0["state"].items():
        for name, v in st.items():
            if torch.is_tensor(v) and v.ndim:
                assert torch.equal(v, r1["state"][k][name]), (k, name)
