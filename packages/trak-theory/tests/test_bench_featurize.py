"""The featurisation benchmark compares equal work, and its registered claims have evidence."""

import importlib.util
import json
import tomllib
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _bench_module():
    path = BENCH / "featurize_throughput.py"
    spec = importlib.util.spec_from_file_location("featurize_throughput", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_traker_baseline_does_the_same_work(tmp_path):
    # traker with one (p, k) block computes what ours computes: its stored features are our
    # margin gradients times its own matrix / sqrt(p), to float32 round-off (p * eps bound),
    # and its stored 1 - p_y are ours. Awkward sizes: a ragged last batch, k not a round number.
    pytest.importorskip("trak")
    fb = _bench_module()
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(64, 9), torch.nn.Tanh(), torch.nn.Linear(9, 7))
    g = torch.Generator().manual_seed(11)
    x, y = torch.randn(37, 64, generator=g), torch.randint(0, 7, (37,), generator=g)
    got = fb.equal_work(net, x, y, k=61, bs=16, parent=tmp_path)
    assert got["feature_shapes"] == [[37, 61], [37, 61]]
    assert got["same_features"], got
    assert got["reweighting_max_abs_diff"] < 1e-5
    _, proj = fb._traker_run(net, x, y, 61, 16, str(tmp_path / "one"), block_size=61)
    assert proj.num_blocks == 1  # the strongest configuration: one block, generated once


def test_fs_type_finds_the_root_mount():
    fb = _bench_module()
    mounts = Path("/proc/mounts")
    if not mounts.is_file():
        assert fb.fs_type(Path("/")) is None
        return
    root = [ln.split()[2] for ln in mounts.read_text().splitlines() if ln.split()[1] == "/"]
    assert fb.fs_type(Path("/")) == root[-1]


def test_every_claim_has_its_case_in_the_evidence():
    claims = tomllib.loads((BENCH / "claims.toml").read_text())["claim"]
    assert claims
    for c in claims:
        assert {"what", "case", "baseline", "goal", "evidence"} <= set(c), c
        assert c["goal"].split()[0] in {"<=", ">=", "<", ">"}, c["goal"]
        doc = json.loads((BENCH.parent / c["evidence"]).read_text())
        hits = [r for r in doc["results"] if r["name"] == c["case"]]
        assert len(hits) == 1, c["case"]
        assert doc["environment"]["cpu"], "the machine is recorded beside the ratio"
        if c.get("script"):  # a fresh `nox -s bench` (--quick) run must write the same case
            assert hits[0]["params"]["n"] == 500, c["case"]
