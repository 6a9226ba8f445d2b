"""Start-up agreement on 3 gloo processes: broadcast from rank 0, settings fingerprint,
collective non-finite handling, resume."""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch

from shared_core.testing import launch_local

HERE = pathlib.Path(__file__).parent
pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("agree")
    run = launch_local(
        [sys.executable, str(HERE / "_agree_worker.py"), str(out)],
        3,
        env={"DILOCO_TEST_TIMEOUT": "20"},
        timeout_s=300,  # a hang guard: process start-up on a loaded 2-core box takes minutes
    )
    assert run.ok, run.logs
    return [torch.load(out / f"rank{r}.pt") for r in range(3)]


def equal(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_unseeded_replicas_start_from_rank0_and_end_identical(ranks):
    assert not equal(ranks[0]["init"], ranks[1]["init"])  # unseeded: really different
    assert not equal(ranks[1]["init"], ranks[2]["init"])
    for r in ranks:
        assert equal(r["after_construction"], ranks[0]["init"])
        assert equal(r["final"], ranks[0]["final"])
    assert not equal(ranks[0]["final"], ranks[0]["init"])  # it trained


def test_per_rank_traffic_is_the_same_on_every_rank(ranks):
    assert ranks[0]["traffic"] == ranks[1]["traffic"] == ranks[2]["traffic"]
    assert ranks[0]["traffic"][0]["bytes_handed"] > 0


@pytest.mark.parametrize(
    ("field", "shown"),
    [
        ("inner_steps", "'inner_steps' is 8 on rank 0 but 4 on rank 2"),
        ("seed", "'seed' is 0 on rank 0 but 1 on rank 1"),
        ("compressor", "'compressor' is TopK(k=None, ratio=0.1) on rank 0"),
    ],
)
def test_differing_setting_fails_on_every_rank_naming_it(ranks, field, shown):
    for r in ranks:
        assert r[field].startswith("ValueError: settings differ across workers"), r[field]
        assert shown in r[field], r[field]


def test_nonfinite_round_is_decided_together(ranks):
    for r in ranks:
        assert r["skipped"] == [0, 1, 0]
        assert equal(r["skip_final"], ranks[0]["skip_final"])
        assert all(bool(x.isfinite().all()) for x in r["skip_final"])
        assert r["raise"].startswith("NonFiniteRoundError: round 1: "), r["raise"]
        assert r["retries"] == [0, 1, 0]  # every rank retried round 1 once, together
        assert equal(r["retry_final"], ranks[0]["retry_final"])
        assert not equal(r["retry_final"], r["skip_final"])
        assert "workers [1]" in r["raise"] and r["raise_rounds_done"] == 1


def test_resume_takes_rank0_outer_state_and_checks_the_round(ranks):
    for r in ranks:
        assert equal(r["resume_final"], ranks[0]["resume_final"])
        assert "'rounds_done' is 1 on rank 0 but 5 on rank 2" in r["resume_round"]


def test_hook_api_on_three_ranks_equals_the_round_engine(ranks):
    for r in ranks:
        assert equal(r["hook_final"], r["round_final"])
        assert equal(r["hook_final"], ranks[0]["hook_final"])
