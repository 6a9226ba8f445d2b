"""The hook API: the user's own loop drives the rounds."""

from __future__ import annotations

import copy
import importlib.util
import math
import pathlib

import pytest
import torch

from diloco_ef import AbsmaxQuant, DiLoCo, DiLoCoHook, LocalCommunicator, NonFiniteRoundError

_spec = importlib.util.spec_from_file_location(
    "_problems", pathlib.Path(__file__).parent / "_problems.py"
)
P = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(P)

H = 3


def inner_sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def outer_nesterov(params):
    return torch.optim.SGD(params, lr=0.7, momentum=0.9, nesterov=True)


def user_loop(model, opt, rounds, loss=P.loss_fn):
    for r in range(rounds):
        for h in range(H):
            opt.zero_grad()
            loss(model, 0, r, h).backward()
            opt.step()


def test_hook_equals_the_round_engine():
    ref = DiLoCo(
        P.make_model(), inner_sgd, outer_nesterov, inner_steps=H, compressor=AbsmaxQuant(bits=4)
    )
    for _ in range(4):
        ref.round(P.loss_fn)
    model = P.make_model()
    opt = inner_sgd(model.parameters())
    hook = DiLoCoHook(model, opt, outer_nesterov, sync_every=H, compressor=AbsmaxQuant(bits=4))
    user_loop(model, opt, 4)
    assert hook.engine.rounds_done == 4
    for a, b in zip(model.parameters(), ref.model.parameters(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(hook.history, ref.history, strict=True):
        assert a["bits"] == b["bits"] and a["alpha"] == b["alpha"]
        assert math.isnan(a["loss"])  # the hook does not see the loss


def test_per_step_scheduler_and_clipping_in_the_users_loop():
    # Outer SGD of step 0.5 without momentum: after one round x1 = x0 - 0.5 (x0 - x_H), where
    # x_H is what the user's loop (LambdaLR per step, gradient clipping) reached on its own.
    model = P.make_model()
    plain = copy.deepcopy(model)
    x0 = [p.detach().clone() for p in model.parameters()]

    def loop(m, n_rounds):
        opt = torch.optim.SGD(m.parameters(), lr=0.2)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
        for h in range(H * n_rounds):
            opt.zero_grad()
            P.loss_fn(m, 0, 0, h).backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.1)
            opt.step()
            sched.step()
        return opt

    loop(plain, 1)  # no hook: the inner trajectory alone
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    hook = DiLoCoHook(model, opt, lambda p: torch.optim.SGD(p, lr=0.5), sync_every=H)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
    for h in range(H):
        opt.zero_grad()
        P.loss_fn(model, 0, 0, h).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        opt.step()
        sched.step()
    assert hook.engine.rounds_done == 1
    for x, xh, p in zip(x0, plain.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(p.detach(), x - 0.5 * (x - xh.detach()), rtol=0, atol=1e-15)


def test_nonfinite_round_raises_from_step_and_rolls_back():
    model = P.make_model()
    opt = inner_sgd(model.parameters())
    hook = DiLoCoHook(model, opt, outer_nesterov, sync_every=H, compressor=AbsmaxQuant(bits=3))
    user_loop(model, opt, 1)
    at_sync = [p.detach().clone() for p in model.parameters()]
    state = copy.deepcopy(opt.state_dict())

    def nan_loss(m, w, r, h):
        return P.loss_fn(m, w, r, h) * (math.nan if h == 1 else 1.0)

    with pytest.raises(NonFiniteRoundError, match="round 1"):
        user_loop(model, opt, 1, nan_loss)
    for a, b in zip(model.parameters(), at_sync, strict=True):
        assert torch.equal(a, b)
    got = opt.state_dict()["state"]
    for k, v in state["state"].items():
        assert torch.equal(got[k]["momentum_buffer"], v["momentum_buffer"])
    user_loop(model, opt, 1)  # training goes on
    assert hook.engine.rounds_done == 2
    hook.remove()
    user_loop(model, opt, 1)
    assert hook.engine.rounds_done == 2


def test_hook_refuses_bad_setups():
    model = P.make_model()
    with pytest.raises(ValueError, match="exactly the model's parameters"):
        DiLoCoHook(
            model, inner_sgd([torch.nn.Parameter(torch.ones(2))]), outer_nesterov, sync_every=2
        )
    with pytest.raises(ValueError, match="one worker per process"):
        DiLoCoHook(
            model,
            inner_sgd(model.parameters()),
            outer_nesterov,
            sync_every=2,
            communicator=LocalCommunicator(2),
        )
