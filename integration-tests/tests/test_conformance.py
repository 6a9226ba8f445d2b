"""The optimizer conformance battery: every optimizer of the suite through the same checks.

The registry is ``_optimizers.CASES``; the problems are ``_battery_problems``. Each check is
one claim a torch.optim user relies on: the loss goes down on standard problems; param groups
carry their own learning rate; ``state_dict`` survives ``torch.save``/``torch.load`` (with the
default ``weights_only=True``) and a resumed run equals an uninterrupted one; closures and
``zero_grad``; bf16 parameters; a parameter that never gets a gradient is left alone;
``torch.compile`` of a step where claimed; DDP with 2 gloo processes (``test_ddp``).
"""

from __future__ import annotations

import importlib.util
import io
import json
import pathlib
import sys

import pytest
import torch

from shared_core.testing import launch_local

HERE = pathlib.Path(__file__).parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


O = _load("_optimizers")
P = _load("_battery_problems")

CASES = O.CASES
IDS = [c.name for c in CASES]


def _run(opt, problem, params, steps):
    for _ in range(steps):
        opt.zero_grad()
        problem.loss(params).backward()
        opt.step()


def _loss(problem, params) -> float:
    with torch.no_grad():
        return float(problem.loss(params))


@pytest.mark.parametrize("problem_name", P.NAMES)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_loss_decreases(case, problem_name):
    if problem_name not in case.lr:
        pytest.skip(f"{case.name} is not registered for {problem_name}")
    problem = P.make(problem_name)
    params = problem.init()
    start = _loss(problem, params)
    opt = case.make(params, case.lr[problem_name])
    _run(opt, problem, params, problem.steps)
    end = _loss(problem, params)
    assert end == end and end <= problem.shrink * start, (start, end)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_state_dict_roundtrip_resumes_exactly(case):
    problem = P.make("mlp", seed=1)
    lr = case.lr["mlp"]
    params = problem.init()
    opt = case.make(params, lr)
    _run(opt, problem, params, 7)
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)

    resumed_params = [p.detach().clone().requires_grad_(True) for p in params]
    resumed = case.make(resumed_params, lr)
    resumed.load_state_dict(loaded)
    _run(opt, problem, params, 8)  # the uninterrupted run: 15 steps in all
    _run(resumed, problem, resumed_params, 8)
    for a, b in zip(params, resumed_params, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    # The run moved the parameters: equality above is not the trivial one.
    assert not torch.equal(params[0], problem.starts[0])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_closure_returns_loss_and_zero_grad_clears(case):
    problem = P.make("quadratic")
    params = problem.init()
    opt = case.make(params, case.lr["quadratic"])
    before = _loss(problem, params)

    def closure():
        opt.zero_grad()
        loss = problem.loss(params)
        loss.backward()
        return loss

    returned = opt.step(closure)
    assert float(returned) == pytest.approx(before, rel=1e-12)
    assert _loss(problem, params) < before
    opt.zero_grad()
    assert all(p.grad is None for p in params)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_param_groups_keep_their_own_lr(case):
    if not case.groups:
        pytest.skip(f"{case.name} takes one flat parameter list (documented)")
    problem = P.make("mlp", seed=2)
    lr = case.lr["mlp"]
    params = problem.init()
    # Matrices in one group, vectors (the biases) in another whose learning rate is 1e9 times
    # smaller: the biases must barely move. (Matrices and vectors apart, as optimizers that
    # route them differently require.)
    w1, b1, w2, b2 = params
    small = {key: lr * 1e-9 for key in case.lr_keys}
    groups = [{"params": [w1, w2]}, {"params": [b1, b2], **small}]
    opt = case.make(groups, lr)
    assert len(opt.param_groups) == 2 and opt.param_groups[1]["lr"] == pytest.approx(lr * 1e-9)
    _run(opt, problem, params, 10)
    moved = [float((p - s).abs().max()) for p, s in zip(params, problem.starts, strict=True)]
    assert moved[0] > 1e-4 and moved[2] > 1e-4, moved
    assert max(moved[1], moved[3]) < 1e-6, moved

    extra = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    opt.add_param_group({"params": [extra]})
    assert len(opt.param_groups) == 3


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_parameter_without_gradient_is_untouched(case):
    problem = P.make("mlp", seed=3)
    params = problem.init()
    unused = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    before = unused.detach().clone()
    opt = case.make([*params, unused], case.lr["mlp"])
    _run(opt, problem, params, 6)
    assert unused.grad is None
    assert torch.equal(unused.detach(), before)
    assert not torch.equal(params[0].detach(), problem.starts[0])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_bf16_parameters(case):
    if not case.bf16:
        pytest.skip(f"{case.name} does not claim bf16 parameters")
    problem = P.make("quadratic", seed=4)
    params = problem.init(torch.bfloat16)
    start = _loss(problem, params)
    opt = case.make(params, case.lr["quadratic"])
    _run(opt, problem, params, 60)
    assert all(p.dtype == torch.bfloat16 for p in params)
    assert all(bool(torch.isfinite(p).all()) for p in params)
    for state in opt.state.values() if hasattr(opt, "state") else ():
        for v in state.values():
            if torch.is_tensor(v):
                assert bool(torch.isfinite(v).all())
    assert _loss(problem, params) < 0.7 * start


@pytest.mark.parametrize("case", [c for c in CASES if c.compile], ids=lambda c: c.name)
def test_compiled_step_matches_eager(case):
    problem = P.make("quadratic", seed=5)
    lr = case.lr["quadratic"]
    eager_params, compiled_params = problem.init(), problem.init()
    eager = case.make(eager_params, lr)
    compiled = case.make(compiled_params, lr)

    @torch.compile(backend="aot_eager", fullgraph=False)
    def compiled_step():
        compiled.step()

    for _ in range(4):
        for opt, ps, step in (
            (eager, eager_params, eager.step),
            (compiled, compiled_params, compiled_step),
        ):
            opt.zero_grad()
            problem.loss(ps).backward()
            step()
    torch.testing.assert_close(compiled_params[0], eager_params[0], rtol=1e-12, atol=1e-14)


def _half_batch_average_run(case, problem, steps: int, world: int = 2) -> torch.Tensor:
    """One process replaying DDP's arithmetic: each rank's gradient, then their average.

    Mathematically this is the full-batch gradient; computing it the way DDP does (the same
    per-rank sums, then (g_0 + g_1) / 2) keeps the comparison exact even for updates that
    amplify rounding (Adam's g / (|g| + eps) has slope up to 1/eps on tiny entries, so a
    full-batch gradient that differs from the average in the last bit would move the
    parameters by ~1e-10).
    """
    x, y = problem.data["X"], problem.data["Y"]
    n = x.shape[0]
    params = problem.init()
    opt = case.make(params, case.lr["mlp"])
    for _ in range(steps):
        grads = []
        for rank in range(world):
            rows = torch.arange(n)[rank::world]
            ps = [p.detach().clone().requires_grad_(True) for p in params]
            loss = (P.mlp_forward(ps, x[rows]) - y[rows]).pow(2).sum() * (world / n)
            grads.append(torch.autograd.grad(loss, ps))
        for p, *gs in zip(params, *grads, strict=True):
            p.grad = sum(gs) / world
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in params])


@pytest.mark.distributed
def test_ddp_two_gloo_processes_agree_with_one_process(tmp_path):
    """Every DDP-capable optimizer: 2 ranks on halves of the batch == 1 process averaging the
    same two half-batch gradients (== the full-batch step up to rounding)."""
    names = [c.name for c in CASES if c.ddp]
    command = [sys.executable, str(HERE / "_ddp_worker.py"), str(tmp_path), *names]
    run = launch_local(command, timeout_s=300)
    assert run.codes == [0, 0], run.logs
    results = json.loads((tmp_path / "rank0.json").read_text())
    assert sorted(results) == sorted(names)

    problem = P.make("mlp", seed=6)
    start = torch.cat([s.reshape(-1) for s in problem.starts])
    for name in names:
        single = _half_batch_average_run(O.by_name(name), problem, steps=5)
        ranks = torch.tensor(results[name]["ranks"], dtype=torch.float64)
        assert torch.equal(ranks[0], ranks[1]), name
        torch.testing.assert_close(ranks[0], single, rtol=1e-12, atol=1e-14, msg=name)
        assert not torch.equal(single, start), name
