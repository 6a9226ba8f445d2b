"""Step sizes under torch's LR schedulers: lr = 0 steps, callables composed with schedulers."""

import copy
import io

import pytest
import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, LambdaLR

from heavytail_sgd.optim import SMD, ClippedSGD, NormalizedSGD
from heavytail_sgd.schedules import StepSchedule
from shared_core.mirror import PNorm

D = torch.float64


def _problem(seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(11, 3, generator=g, dtype=D)
    b = torch.randn(11, generator=g, dtype=D)
    return (lambda w: 0.5 * ((a @ w - b) ** 2).mean()), torch.randn(3, generator=g, dtype=D)


def _train(opt, params, loss, sched, steps):
    for _ in range(steps):
        opt.zero_grad()
        loss(params[0]).backward()
        opt.step()
        if sched is not None:
            sched.step()


@pytest.mark.parametrize(
    "make_sched",
    [
        # linear warm-up: the first step has lr = 0
        lambda o: LambdaLR(o, lambda e: min(1.0, e / 4)),
        # annealed to exactly 0 at T_max = 6, then back up
        lambda o: CosineAnnealingLR(o, T_max=6, eta_min=0.0),
    ],
    ids=["warmup", "cosine"],
)
def test_smd_follows_torch_sgd_through_zero_lr_steps(make_sched):
    loss, w0 = _problem()
    w1, w2 = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    o1, o2 = SMD([w1], lr=0.2), torch.optim.SGD([w2], lr=0.2)
    s1, s2 = make_sched(o1), make_sched(o2)
    seen = []
    for _ in range(9):
        seen.append(o1.param_groups[0]["lr"])
        _train(o1, [w1], loss, s1, 1)
        _train(o2, [w2], loss, s2, 1)
        # same kernel (x + alpha g) on the same numbers: 1 ulp per step is the error model
        torch.testing.assert_close(w1, w2, rtol=0, atol=1e-14)
    assert 0.0 in seen  # the case does exercise an lr = 0 step
    assert o1.state[w1]["step"] == 9


@pytest.mark.parametrize(
    "make",
    [
        lambda p, lr: SMD(p, lr=lr),
        lambda p, lr: SMD(p, lr=lr, mirror=PNorm(1.5), foreach=False),
        lambda p, lr: SMD(p, lr=lr, mirror="entropy"),
        lambda p, lr: ClippedSGD(p, lr=lr, clip=1.0),
        lambda p, lr: NormalizedSGD(p, lr=lr),
    ],
    ids=["smd", "smd-pnorm", "smd-entropy", "clipped", "normalized"],
)
def test_lr_zero_is_a_no_op_step(make):
    x = torch.nn.Parameter(torch.tensor([0.2, 0.3, 0.5], dtype=D))
    opt = make([x], 0.0)
    x.grad = torch.tensor([1.0, -2.0, 0.5], dtype=D)
    opt.step()
    assert torch.equal(x.detach(), torch.tensor([0.2, 0.3, 0.5], dtype=D))
    assert opt.state[x]["step"] == 1
    opt.param_groups[0]["lr"] = 0.1  # and it moves once the rate is positive
    opt.step()
    assert not torch.equal(x.detach(), torch.tensor([0.2, 0.3, 0.5], dtype=D))


def _reference_run(w0, loss, eta_of_t, steps):
    """Plain x <- x - eta_t grad with the step sizes written out, in float64."""
    w = w0.clone().requires_grad_(True)
    for t in range(1, steps + 1):
        (g,) = torch.autograd.grad(loss(w), w)
        with torch.no_grad():
            w -= eta_of_t(t) * g
    return w.detach()


@pytest.mark.parametrize("schedule", [StepSchedule(0.3, 0.5), lambda t: 0.3 / t], ids=["cls", "fn"])
def test_callable_lr_composes_with_lambda_lr_by_product(schedule):
    loss, w0 = _problem(1)
    w = torch.nn.Parameter(w0.clone())
    opt = SMD([w], lr=schedule)
    assert opt.param_groups[0]["lr"] == 1.0 and opt.param_groups[0]["lr_schedule"] is schedule
    warm = lambda e: min(1.0, (e + 1) / 3)  # noqa: E731
    sched = LambdaLR(opt, warm)
    _train(opt, [w], loss, sched, 7)
    # the scheduler's factor at the t-th step is warm(t - 1): it starts at epoch 0
    ref = _reference_run(w0, loss, lambda t: warm(t - 1) * schedule(t), 7)
    torch.testing.assert_close(w.detach(), ref, rtol=0, atol=1e-13)


def test_callable_lr_under_cosine_annealing_ends_in_no_op_steps():
    loss, w0 = _problem(2)
    w = torch.nn.Parameter(w0.clone())
    opt = SMD([w], lr=StepSchedule(0.3, 0.5), average="weighted")
    sched = CosineAnnealingLR(opt, T_max=4)
    _train(opt, [w], loss, sched, 4)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-15)
    before = w.detach().clone()
    avg_before = opt.averaged_params()[0]
    _train(opt, [w], loss, None, 1)  # a step at lr = 0: no move, zero weight in the average
    assert torch.equal(w.detach(), before)
    torch.testing.assert_close(opt.averaged_params()[0], avg_before, rtol=1e-15, atol=0)


def test_weighted_average_over_leading_zero_lr_steps_is_the_point():
    x = torch.nn.Parameter(torch.tensor([1.0, -1.0], dtype=D))
    opt = SMD([x], lr=0.0, average="weighted")
    for _ in range(3):
        x.grad = torch.ones(2, dtype=D)
        opt.step()
    (avg,) = opt.averaged_params()
    assert torch.equal(avg, x.detach())  # all weights 0 so far: the (unmoved) point, not 0
    opt.param_groups[0]["lr"] = 0.5
    x.grad = torch.ones(2, dtype=D)
    opt.step()  # first positive weight: the average is the query point of this step
    torch.testing.assert_close(opt.averaged_params()[0], torch.tensor([1.0, -1.0], dtype=D))


def test_added_group_is_validated_and_keeps_its_own_constant_lr():
    a = torch.nn.Parameter(torch.ones(2, dtype=D))
    opt = SMD([a], lr=StepSchedule(1.0, 1.0))
    with pytest.raises(ValueError, match="lr"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(2, dtype=D))], "lr": -1})
    with pytest.raises(ValueError, match="outside the domain"):
        opt.add_param_group({"params": torch.nn.Parameter(torch.ones(2)), "mirror": "entropy"})
    assert len(opt.param_groups) == 1  # a refused group is not half-added
    b = torch.nn.Parameter(torch.ones(2, dtype=D))
    opt.add_param_group({"params": b, "lr": 0.25})
    c = torch.nn.Parameter(torch.ones(2, dtype=D))
    opt.add_param_group({"params": [c]})  # inherits the default schedule
    for _ in range(2):
        for p in (a, b, c):
            p.grad = torch.ones(2, dtype=D)
        opt.step()
    torch.testing.assert_close(b.detach(), torch.full((2,), 0.5, dtype=D))  # 2 x 0.25
    torch.testing.assert_close(c.detach(), torch.full((2,), -0.5, dtype=D))  # 1 - 1 - 1/2
    torch.testing.assert_close(a.detach(), c.detach())


def test_state_dict_with_schedule_and_scheduler_round_trips():
    loss, w0 = _problem(3)
    w1 = torch.nn.Parameter(w0.clone())
    o1 = SMD([w1], lr=StepSchedule(0.3, 0.5), average="uniform")
    s1 = LambdaLR(o1, lambda e: 0.5 ** (e // 2))
    _train(o1, [w1], loss, s1, 3)
    w2 = torch.nn.Parameter(w1.detach().clone())
    o2 = SMD([w2], lr=0.1, average="uniform")
    s2 = LambdaLR(o2, lambda e: 0.5 ** (e // 2))
    buf = io.BytesIO()
    torch.save({"opt": o1.state_dict(), "sched": s1.state_dict()}, buf)
    buf.seek(0)
    ck = torch.load(buf, weights_only=True)
    o2.load_state_dict(ck["opt"])
    s2.load_state_dict(ck["sched"])
    _train(o1, [w1], loss, s1, 3)
    _train(o2, [w2], loss, s2, 3)
    assert torch.equal(w1.detach(), w2.detach())


def test_checkpoint_of_the_first_version_with_a_callable_lr_loads():
    loss, w0 = _problem(4)
    w = torch.nn.Parameter(w0.clone())
    opt = SMD([w], lr=0.1)
    old = copy.deepcopy(opt.state_dict())
    old["param_groups"][0]["lr"] = StepSchedule(0.2, 0.5)  # how version 0.1.0 stored it
    del old["param_groups"][0]["lr_schedule"]
    opt.load_state_dict(old)
    assert opt.param_groups[0]["lr"] == 1.0
    sched = LambdaLR(opt, lambda e: 1.0)
    _train(opt, [w], loss, sched, 2)
    ref = _reference_run(w0, loss, StepSchedule(0.2, 0.5), 2)
    torch.testing.assert_close(w.detach(), ref, rtol=0, atol=1e-14)


def test_negative_schedule_value_is_reported_with_t():
    a = torch.nn.Parameter(torch.ones(2))
    opt = SMD([a], lr=lambda t: 0.1 if t < 2 else -1.0)
    a.grad = torch.ones(2)
    opt.step()
    with pytest.raises(ValueError, match="t=2"):
        opt.step()
