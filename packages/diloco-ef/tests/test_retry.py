"""on_nonfinite="retry": a failed round is rolled back and re-run with a smaller inner lr;
the result must equal, bit for bit, a run that used that lr in that round from the start."""

from __future__ import annotations

import importlib.util
import math
import pathlib

import pytest
import torch

from diloco_ef import DiLoCoHook, NonFiniteRoundError, TopK

HERE = pathlib.Path(__file__).parent
_spec = importlib.util.spec_from_file_location("_transactions", HERE / "test_transactions.py")
T = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(T)
P = T.P
LR = 0.05


def make(policy, **kw):
    # Top-k: error feedback without the Triton interpreter's cost (int8 kernels) on CPU
    return T.make_algo(policy, compressor=TopK(ratio=0.3), **kw)


def faulty(bad_round, times, worker=1, step=1):
    """P.loss_fn, NaN at (bad_round, worker, step) for the first ``times`` calls there (a
    transient fault: every other call, retries included, sees the same batches as usual)."""
    hits = [0]

    def loss_fn(model, w, rnd, h):
        loss = P.loss_fn(model, w, rnd, h)
        if (rnd, w, h) == (bad_round, worker, step) and hits[0] < times:
            hits[0] += 1
            return loss * math.nan
        return loss

    return loss_fn


def state(algo):
    """The full state without the settings fingerprint (the policies differ)."""
    s = T.full_state(algo)
    s.pop("fingerprint")
    return s


def without_retries(history):
    return [{k: v for k, v in h.items() if k != "retries"} for h in history]


@pytest.mark.parametrize("faults", [1, 2])
def test_retry_equals_a_run_with_the_smaller_lr_in_that_round(faults):
    hit = make("retry", inner_lr=lambda r: LR)
    ref = make("raise", inner_lr=lambda r: LR * 0.5**faults if r == 2 else LR)
    loss = faulty(2, faults)
    for _ in range(5):
        hit.round(loss)
        ref.round(P.loss_fn)
    assert [h["retries"] for h in hit.history] == [0, 0, faults, 0, 0]
    T.assert_same(state(hit), state(ref))
    # The same records, except that the failed attempts' finiteness checks were traffic too:
    # one flag byte handed per attempt, all-gathered among 3 workers (2 bytes each way).
    extra = [
        {
            **h,
            "bytes_handed": h["bytes_handed"] + faults * (h["round"] == 2),
            "bytes_sent": h["bytes_sent"] + 2 * faults * (h["round"] == 2),
            "bytes_received": h["bytes_received"] + 2 * faults * (h["round"] == 2),
        }
        for h in ref.history
    ]
    assert without_retries(hit.history) == without_retries(extra)


def test_retry_without_schedule_scales_the_optimizer_lr_for_that_round_only(caplog):
    hit = make("retry", retry_lr_factor=0.25)
    ref = make("raise", inner_lr=lambda r: LR * 0.25 if r == 1 else LR)
    with caplog.at_level("WARNING", logger="diloco_ef"):
        for r in range(3):
            hit.round(faulty(1, 1) if r == 1 else P.loss_fn)
            ref.round(P.loss_fn)
            assert all(g["lr"] == LR for o in hit.inner_opts for g in o.param_groups)
    assert "retry 1 of 3 with the inner lr x 0.25" in caplog.text and "round 1" in caplog.text
    T.assert_same(state(hit), state(ref))


def test_exhausted_retries_raise_with_every_attempt_rolled_back(caplog):
    clean = make("raise")
    hit = make("retry", max_retries=2)
    for _ in range(2):
        clean.round(P.loss_fn)
        hit.round(P.loss_fn)
    before = state(hit)
    with (
        caplog.at_level("WARNING", logger="diloco_ef"),
        pytest.raises(NonFiniteRoundError, match=r"round 2: .*workers \[1\] after 2 retries"),
    ):
        hit.round(faulty(2, times=10))
    assert caplog.text.count("round rolled back, retry") == 2
    assert hit.rounds_done == 2 and len(hit.history) == 2
    T.assert_same(state(hit), before)  # momentum, BatchNorm buffers, lr, EF, outer
    for _ in range(2):  # and it goes on as if nothing had happened
        clean.round(P.loss_fn)
        hit.round(P.loss_fn)
    T.assert_same(state(hit), state(clean))


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"retry_lr_factor": 1.0}, r"retry_lr_factor .* got 1.0"),
        ({"retry_lr_factor": 0}, r"retry_lr_factor .* got 0"),
        ({"retry_lr_factor": math.nan}, r"retry_lr_factor .* got nan"),
        ({"retry_lr_factor": True}, r"retry_lr_factor .* got True"),
        ({"max_retries": 0}, r"max_retries .* got 0"),
        ({"max_retries": 1.5}, r"max_retries .* got 1.5"),
    ],
)
def test_bad_retry_settings_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        make("retry", **kw)


def test_retry_settings_are_part_of_the_fingerprint_and_hook_refuses_retry():
    a = make("retry").fingerprint()["on_nonfinite"]
    b = make("retry", retry_lr_factor=0.25).fingerprint()["on_nonfinite"]
    assert a != b and "0.25" in b
    model = P.make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="retry"):
        DiLoCoHook(
            model, opt, lambda p: torch.optim.SGD(p, lr=0.7), sync_every=2, on_nonfinite="retry"
        )
