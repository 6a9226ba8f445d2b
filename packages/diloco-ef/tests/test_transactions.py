"""Rounds as transactions: non-finite rounds roll back, schedules and checkpoints are checked."""

from __future__ import annotations

import copy
import importlib.util
import math
import pathlib

import pytest
import torch

from diloco_ef import AbsmaxQuant, ApproxTopK, DiLoCo, NonFiniteRoundError, TopK
from diloco_ef.comm import _first_difference

_spec = importlib.util.spec_from_file_location(
    "_problems", pathlib.Path(__file__).parent / "_problems.py"
)
P = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(P)


def make_bn_model(seed=0):
    # BatchNorm gives the replicas buffers that the inner phase changes.
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(P.D_IN, 7), torch.nn.BatchNorm1d(7), torch.nn.Tanh(), torch.nn.Linear(7, 3)
    ).double()


def make_algo(policy="raise", compressor=None, model=None, **kw):
    return DiLoCo(
        model if model is not None else make_bn_model(),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
        lambda p: torch.optim.SGD(p, lr=0.7, momentum=0.9, nesterov=True),
        inner_steps=3,
        num_workers=3,
        compressor=compressor if compressor is not None else AbsmaxQuant(bits=4),
        on_nonfinite=policy,
        **kw,
    )


def poisoned(bad_round, bad_worker, bad_step=1):
    def loss_fn(model, worker, rnd, step):
        loss = P.loss_fn(model, worker, rnd, step)
        if (rnd, worker, step) == (bad_round, bad_worker, bad_step):
            return loss * math.nan
        return loss

    return loss_fn


def full_state(algo):
    s = copy.deepcopy(algo.state_dict())
    for k in ("history", "rounds_done", "torch_rng"):
        s.pop(k)
    return s


def assert_same(a, b, path="state"):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def test_raise_rolls_back_everything_and_a_retry_equals_a_clean_run():
    clean, hit = make_algo(), make_algo()
    for _ in range(2):
        clean.round(P.loss_fn)
        hit.round(P.loss_fn)
    before = full_state(hit)
    # Worker 1's loss turns NaN at its second inner step of round 2: every worker's inner
    # replica, momentum and BatchNorm statistics have moved, no EF buffer or outer state yet.
    with pytest.raises(NonFiniteRoundError, match=r"round 2: .* workers \[1\]"):
        hit.round(poisoned(2, 1))
    assert hit.rounds_done == 2 and len(hit.history) == 2
    assert_same(full_state(hit), before)
    for _ in range(2):  # retrying continues exactly as if the bad attempt never happened
        clean.round(P.loss_fn)
        hit.round(P.loss_fn)
    assert_same(full_state(hit), full_state(clean))


def test_skip_keeps_state_finite_and_moves_on(caplog):
    algo = make_algo("skip", compressor=TopK(ratio=0.3))
    algo.round(P.loss_fn)
    before = full_state(algo)
    with caplog.at_level("WARNING", logger="diloco_ef"):
        rec = algo.round(poisoned(1, 2, bad_step=0))
    assert rec["skipped"] == 1 and math.isnan(rec["loss"]) and rec["bits"] == 0
    assert "round 1" in caplog.text and "[2]" in caplog.text
    assert_same(full_state(algo), before)
    assert algo.rounds_done == 2
    rec = algo.round(P.loss_fn)
    assert rec["skipped"] == 0 and math.isfinite(rec["loss"])
    assert all(bool(x.isfinite().all()) for x in algo.outer_params)


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf, "0.1", None])
def test_schedule_outputs_are_validated_before_the_round(bad):
    algo = DiLoCo(
        P.make_model(),
        lambda p: torch.optim.SGD(p, lr=0.05),
        lambda p: torch.optim.SGD(p, lr=1.0),
        inner_steps=2,
        num_workers=2,
        inner_lr=lambda r: 0.05 if r == 0 else bad,
    )
    algo.round(P.loss_fn)
    before = full_state(algo)
    with pytest.raises(ValueError, match=r"inner_lr\(1\) returned"):
        algo.round(P.loss_fn)
    assert algo.rounds_done == 1
    assert_same(full_state(algo), before)


def test_bad_policy_is_refused():
    with pytest.raises(ValueError, match=r"on_nonfinite.*'retreat'"):
        make_algo("retreat")


def test_checkpoint_of_another_compressor_is_refused():
    a = make_algo(compressor=TopK(ratio=0.3))
    a.round(P.loss_fn)
    ckpt = a.state_dict()
    for other, field in [
        (AbsmaxQuant(bits=4), r"compressor=TopK\(k=None, ratio=0.3\).*AbsmaxQuant"),
        (TopK(ratio=0.2), r"ratio=0.3.*ratio=0.2"),
    ]:
        with pytest.raises(ValueError, match=field):
            make_algo(compressor=other).load_state_dict(ckpt)
    make_algo(compressor=TopK(ratio=0.3)).load_state_dict(ckpt)  # the same settings load


def test_compressor_config_ignores_counters():
    a, b = ApproxTopK(ratio=0.1), ApproxTopK(ratio=0.1)
    b.fallbacks = 7
    assert a.config() == b.config() != ApproxTopK(ratio=0.1, slack=0.5).config()


def test_first_difference_names_field_and_rank():
    same = {"inner_steps": "4", "seed": "0"}
    assert _first_difference([same, dict(same), dict(same)]) is None
    msg = _first_difference([same, dict(same), {"inner_steps": "8", "seed": "0"}])
    assert msg == "settings differ across workers: 'inner_steps' is 4 on rank 0 but 8 on rank 2"
    assert "'extra' is None on rank 0" in _first_difference([same, {**same, "extra": "1"}])
