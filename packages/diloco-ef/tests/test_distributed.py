"""Two gloo processes on loopback against the single-process simulation."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest
import torch

from diloco_ef import DiLoCo, TorchDistCommunicator
from shared_core.testing import launch_local

HERE = pathlib.Path(__file__).parent
_spec = importlib.util.spec_from_file_location("_dist_worker", HERE / "_dist_worker.py")
W = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(W)

pytestmark = pytest.mark.distributed


def _launch(mode: str, out: pathlib.Path, timeout_s: int = 5, wait: int = 300):
    # `wait` guards against hangs only; start-up of the processes under load takes minutes.
    command = [sys.executable, str(HERE / "_dist_worker.py"), mode, str(out)]
    run = launch_local(command, env={"DILOCO_TEST_TIMEOUT": str(timeout_s)}, timeout_s=wait)
    return run.codes, run.logs


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """One 2-process run of every scenario (agree, shapes, dead); rank 1 dies at the end."""
    out = tmp_path_factory.mktemp("dist")
    codes, logs = _launch("all", out, timeout_s=5)
    return out, codes, logs


def test_two_gloo_workers_agree_with_simulation(launched):
    tmp_path, _, logs = launched
    assert (tmp_path / "rank0.pt").is_file() and (tmp_path / "rank1.pt").is_file(), logs
    r0 = torch.load(tmp_path / "rank0.pt")
    r1 = torch.load(tmp_path / "rank1.pt")
    for name, make in W.CONFIGS.items():
        sim = DiLoCo(
            W.P.make_model(),
            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
            lambda p: torch.optim.SGD(p, lr=0.7, momentum=0.9, nesterov=True),
            inner_steps=W.H,
            num_workers=2,
            compressor=make() if make else None,
        )
        for _ in range(W.ROUNDS):
            sim.round(W.P.loss_fn)
        for a, b, c in zip(
            r0[name]["params"], r1[name]["params"], sim.model.parameters(), strict=True
        ):
            assert torch.equal(a, b), name  # both ranks hold the same outer iterate
            torch.testing.assert_close(a, c.detach(), rtol=1e-12, atol=1e-13, msg=name)
        # Traffic per rank is half the simulation's (one of two workers).
        bits = [
            h0["bits"] + h1["bits"]
            for h0, h1 in zip(r0[name]["history"], r1[name]["history"], strict=True)
        ]
        assert bits == [h["bits"] for h in sim.history], name
        # The meter: each rank hands over what the simulation counts for one rank.
        for key in ("bytes_handed", "bytes_sent", "bytes_received"):
            for h0, h1, hs in zip(
                r0[name]["history"], r1[name]["history"], sim.history, strict=True
            ):
                assert h0[key] == h1[key] == hs[key] > 0, (name, key)
        assert sim.history[-1]["loss"] < sim.history[0]["loss"], name


def test_mismatched_shapes_across_processes(launched):
    tmp_path, _, logs = launched
    for rank in (0, 1):
        text = (tmp_path / f"shapes{rank}.txt").read_text()
        assert "settings differ across workers: 'parameters'" in text, logs


def test_dead_peer_fails_fast_with_clear_error(launched):
    tmp_path, codes, logs = launched
    assert codes == [0, 3], logs  # rank 0 reports and exits cleanly; rank 1 died
    elapsed, msg = (tmp_path / "dead0.txt").read_text().split("\n", 1)
    assert msg.startswith("PeerFailureError: rank 0/2: collective all_gather failed"), msg
    assert float(elapsed) < 5 + 10  # within the timeout plus start-up slack, not a hang


@pytest.mark.slow
def test_silent_peer_times_out_with_clear_error(tmp_path):
    codes, logs = _launch("stall", tmp_path, timeout_s=3)
    assert codes == [0, 3], logs
    elapsed, msg = (tmp_path / "stall0.txt").read_text().split("\n", 1)
    assert msg.startswith("PeerFailureError: rank 0/2: collective all_gather failed"), msg
    assert 2.5 < float(elapsed) < 3 + 10  # the process group timeout, not a hang


def test_communicator_needs_initialised_group():
    with pytest.raises(RuntimeError, match="not initialised"):
        TorchDistCommunicator()
