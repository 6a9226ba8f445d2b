"""The training CLI: simulated workers, and two gloo processes started as torchrun would."""

from __future__ import annotations

import json
import sys

import pytest

from diloco_ef import train as T
from shared_core.testing import launch_local

SMALL = ["--steps", "32", "--inner-steps", "8", "--dim", "9", "--hidden", "13", "--samples", "97"]


def _run_sim(tmp_path, *extra: str) -> dict:
    out = tmp_path / f"sim{len(list(tmp_path.iterdir()))}.json"
    assert T.main([*SMALL, "--workers", "2", "--out", str(out), *extra]) == 0
    return json.loads(out.read_text())


def test_bytes_follow_the_bit_accounting(tmp_path):
    dense = _run_sim(tmp_path, "--algo", "diloco")
    params, rounds = dense["params"], 32 // 8
    assert dense["bytes"] == 2 * rounds * params * 32 / 8  # two workers, float32, every round
    ddp = _run_sim(tmp_path, "--algo", "ddp")
    assert ddp["rounds"] == 32 and ddp["bytes"] == 8 * dense["bytes"]
    ef = _run_sim(tmp_path, "--algo", "diloco-ef", "--compressor", "randomk", "--ratio", "0.1")
    # Random-k: round(0.1 * numel) float32 values per tensor, no indices
    tensors = [9 * 13, 13, 13, 1]
    per_round = sum(max(1, round(0.1 * n)) * 32 for n in tensors)
    assert ef["bytes"] == 2 * rounds * per_round / 8
    assert 0 < ef["mean_alpha"] < 1 and dense["mean_alpha"] == 1.0
    # 1-bit signs and 3-bit levels per coordinate, plus one float32 scale per tensor
    sign = _run_sim(tmp_path, "--algo", "diloco-ef", "--compressor", "sign")
    assert sign["bytes"] == 2 * rounds * (sum(tensors) + 32 * len(tensors)) / 8
    q3 = _run_sim(tmp_path, "--algo", "diloco-ef", "--compressor", "absmax", "--bits", "3")
    assert q3["bytes"] == 2 * rounds * (3 * sum(tensors) + 32 * len(tensors)) / 8
    assert 0 < sign["mean_alpha"] < 1 and 0 < q3["mean_alpha"] < 1
    # PowerSGD rank 1: factors of the 13x9 weight (13 + 9); the rest dense (13, 1x13, 1)
    ps = _run_sim(tmp_path, "--algo", "diloco-ef", "--compressor", "powersgd", "--rank", "1")
    assert ps["bytes"] == 2 * rounds * 32 * ((13 + 9) + 13 + 13 + 1) / 8
    assert 0 < ps["mean_alpha"] < 1


def test_training_reduces_the_held_out_loss(tmp_path):
    start = _run_sim(tmp_path, "--algo", "ddp", "--lr", "1e-9")  # barely moves: the start loss
    for algo in (["--algo", "ddp"], ["--algo", "diloco-ef", "--compressor", "int8"]):
        assert _run_sim(tmp_path, *algo)["final_loss"] < 0.7 * start["final_loss"]


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        T.parse_args(["--steps", "30", "--inner-steps", "8", "--algo", "diloco"])
    with pytest.raises(SystemExit):
        T.parse_args(["--ratio", "0"])
    for bits in ("1", "9"):
        with pytest.raises(SystemExit):
            T.parse_args(["--compressor", "absmax", "--bits", bits])


@pytest.mark.distributed
@pytest.mark.slow  # two interpreter start-ups; the gloo engine itself is covered by default
@pytest.mark.parametrize(
    "comp",
    [["topk", "--ratio", "0.2"], ["sign"], ["absmax", "--bits", "3"]],
    ids=["topk", "sign", "absmax-3b"],
)
def test_two_torchrun_style_processes_match_the_simulation(tmp_path, comp):
    args = [*SMALL, "--algo", "diloco-ef", "--compressor", *comp]
    out = tmp_path / "dist.json"
    cmd = [sys.executable, "-m", "diloco_ef.train", *args, "--device", "cpu"]
    cmd += ["--timeout", "30", "--out", str(out)]
    run = launch_local(cmd, timeout_s=120)
    codes, logs = run.codes, run.logs
    assert codes == [0, 0], logs
    assert "final_loss=" in logs[0] and "bytes=" in logs[0]
    got = json.loads(out.read_text())
    sim = _run_sim(tmp_path, "--algo", "diloco-ef", "--compressor", *comp)
    assert got["distributed"] and got["backend"] == "gloo" and got["world_size"] == 2
    assert got["bytes"] == sim["bytes"]
    assert got["final_loss"] == pytest.approx(sim["final_loss"], rel=1e-5)
    assert got["final_train_loss"] == pytest.approx(sim["final_train_loss"], rel=1e-5)
