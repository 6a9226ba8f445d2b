"""SMD against torch.optim.SGD and exponentiated gradient; baselines; torch.optim conventions."""

import copy
import io

import pytest
import torch

from heavytail_sgd.optim import SMD, ClippedSGD, NormalizedSGD, clip_by_norm, normalize
from heavytail_sgd.schedules import convex_smd_anytime
from shared_core.mirror import Ball, Euclidean, PNorm


@pytest.fixture(autouse=True)
def _float64_default():
    # Scoped to this module's tests: a global default would leak into every later test.
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def _model(seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.nn.Sequential(
            torch.nn.Linear(4, 5, dtype=torch.float64), torch.nn.Tanh(), torch.nn.Linear(5, 1)
        ).requires_grad_(True),
        torch.randn(16, 4, generator=g),
        torch.randn(16, 1, generator=g),
    )


def _loss(model, x, y):
    return ((model(x) - y) ** 2).mean()


@pytest.mark.parametrize("lr", [0.1, convex_smd_anytime(1.5, 2.0, 1.0)])
def test_euclidean_smd_equals_sgd_step_for_step(lr):
    torch.manual_seed(0)
    m1, x, y = _model()
    m2 = copy.deepcopy(m1)
    o1 = SMD(m1.parameters(), lr=lr)
    ref_lr = lr if isinstance(lr, float) else lr(1)
    o2 = torch.optim.SGD(m2.parameters(), lr=ref_lr)
    for t in range(1, 31):
        if not isinstance(lr, float):
            o2.param_groups[0]["lr"] = lr(t)
        for m, o in ((m1, o1), (m2, o2)):
            o.zero_grad()
            _loss(m, x, y).backward()
            o.step()
        for a, b in zip(m1.parameters(), m2.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_entropy_smd_equals_exponentiated_gradient():
    g = torch.Generator().manual_seed(1)
    c = torch.randn(6, generator=g)
    x = torch.nn.Parameter(torch.softmax(torch.randn(6, generator=g), 0))
    ref = x.detach().clone()
    opt = SMD([x], lr=0.3, mirror="entropy")
    for _ in range(25):
        opt.zero_grad()
        loss = (c * x).sum() + (x**2).sum()
        loss.backward()
        opt.step()
        grad = c + 2 * ref
        w = ref * torch.exp(-0.3 * grad)
        ref = w / w.sum()
        torch.testing.assert_close(x.detach(), ref, rtol=0, atol=1e-12)


def test_pnorm_smd_step_is_the_dual_space_step():
    x = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    m = PNorm(1.5)
    start = x.detach().clone()
    opt = SMD([x], lr=0.2, mirror=m)
    x.grad = torch.tensor([0.3, 0.1, -1.0])
    opt.step()
    expect = m.grad_psi_star(m.grad_psi(start) - 0.2 * x.grad)
    torch.testing.assert_close(x.detach(), expect, rtol=0, atol=1e-12)


def test_projected_euclidean_on_a_ball():
    x = torch.nn.Parameter(torch.tensor([0.6, 0.0]))
    opt = SMD([x], lr=1.0, mirror=Euclidean(Ball(1.0)))
    x.grad = torch.tensor([-1.0, 0.0])
    opt.step()
    torch.testing.assert_close(x.detach(), torch.tensor([1.0, 0.0]))


@pytest.mark.parametrize("average", ["uniform", "weighted"])
def test_averages_are_the_weighted_means_of_query_points(average):
    x = torch.nn.Parameter(torch.tensor([3.0, -1.0]))
    sched = convex_smd_anytime(1.5, 1.0, 1.0)
    opt = SMD([x], lr=sched, average=average)
    points, weights = [], []
    for t in range(1, 8):
        points.append(x.detach().clone())
        weights.append(1.0 if average == "uniform" else sched(t))
        x.grad = x.detach() * 2
        opt.step()
    ref = sum(w * p for w, p in zip(weights, points, strict=True)) / sum(weights)
    (avg,) = opt.averaged_params()
    torch.testing.assert_close(avg, ref, rtol=0, atol=1e-12)
    current = x.detach().clone()
    with opt.swap_average():
        torch.testing.assert_close(x.detach(), ref, rtol=0, atol=1e-12)
    assert torch.equal(x.detach(), current)


def test_state_dict_round_trip_continues_identically():
    m1, x, y = _model(2)
    o1 = SMD(m1.parameters(), lr=convex_smd_anytime(1.5, 1.0, 1.0), average="weighted")

    def run(m, o, n):
        for _ in range(n):
            o.zero_grad()
            _loss(m, x, y).backward()
            o.step()

    run(m1, o1, 5)
    m2 = copy.deepcopy(m1)
    o2 = SMD(m2.parameters(), lr=0.5, average="weighted")
    # Through a file with torch.load's default weights_only=True, as users save checkpoints:
    # the group's schedule and mirror map must be allowlisted to load.
    buf = io.BytesIO()
    torch.save(o1.state_dict(), buf)
    buf.seek(0)
    o2.load_state_dict(torch.load(buf, weights_only=True))
    run(m1, o1, 5)
    run(m2, o2, 5)
    for a, b in zip(m1.parameters(), m2.parameters(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(o1.averaged_params(), o2.averaged_params(), strict=True):
        assert torch.equal(a, b)
    assert o2.state[next(m2.parameters())]["step"] == 10


def test_state_is_lazy_and_closure_loss_is_returned():
    m, x, y = _model(3)
    opt = SMD(m.parameters(), lr=0.1, average="uniform")
    assert len(opt.state) == 0

    def closure():
        opt.zero_grad()
        loss = _loss(m, x, y)
        loss.backward()
        return loss

    before = float(closure().detach())
    loss = opt.step(closure)
    assert float(loss.detach()) == pytest.approx(before)
    assert len(opt.state) == 4 and all("avg" in s for s in opt.state.values())


def test_params_without_grad_are_skipped():
    a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    opt = SMD([a, b], lr=0.1)
    a.grad = torch.ones(2)
    opt.step()
    assert torch.equal(b.detach(), torch.ones(2)) and b not in opt.state


def test_clipped_sgd_is_sgd_on_the_globally_clipped_gradient():
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    opt = ClippedSGD([a, b], lr=0.5, clip=1.0)
    a.grad, b.grad = torch.tensor([2.0, 0.0]), torch.tensor([2.0])
    opt.step()
    s = 1.0 / (8**0.5)
    torch.testing.assert_close(a.detach(), -0.5 * s * torch.tensor([2.0, 0.0]))
    torch.testing.assert_close(b.detach(), -0.5 * s * torch.tensor([2.0]))
    # under the level it is plain SGD
    a.grad, b.grad = torch.tensor([0.1, 0.0]), torch.tensor([0.0])
    before = a.detach().clone()
    opt.step()
    torch.testing.assert_close(a.detach(), before - 0.05 * torch.tensor([1.0, 0.0]))


def test_normalized_sgd_moves_exactly_lr():
    a = torch.nn.Parameter(torch.zeros(3))
    opt = NormalizedSGD([a], lr=lambda t: 0.1 / t)
    for t in (1, 2):
        before = a.detach().clone()
        a.grad = torch.tensor([1e6, -3e6, 2e6])
        opt.step()
        assert float((a.detach() - before).norm()) == pytest.approx(0.1 / t)
    a.grad = torch.zeros(3)
    before = a.detach().clone()
    opt.step()
    assert torch.equal(a.detach(), before)


def test_pure_directions_rowwise():
    g = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    torch.testing.assert_close(clip_by_norm(g, 1.0, dim=-1)[0], torch.tensor([0.6, 0.8]))
    torch.testing.assert_close(clip_by_norm(g, 1.0, dim=-1)[1], g[1])
    torch.testing.assert_close(normalize(g, dim=-1)[1], torch.tensor([0.6, 0.8]))
    assert torch.equal(normalize(g, dim=-1)[2], torch.zeros(2))


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda p: SMD(p, lr=float("inf")), "lr"),
        (lambda p: SMD(p, lr=0.1, foreach="yes"), "foreach"),
        (lambda p: SMD(p, lr=-1.0), "lr"),
        (lambda p: SMD(p, lr=float("nan")), "lr"),
        (lambda p: SMD(p, lr=0.1, mirror="hyperbolic"), "unknown mirror"),
        (lambda p: SMD(p, lr=0.1, average="ema"), "average"),
        (lambda p: SMD(p, lr=0.1, mirror="entropy"), "outside the domain"),
        (lambda p: SMD(p, lr=0.1, mirror=Euclidean(Ball(0.5))), "outside the domain"),
        (lambda p: ClippedSGD(p, lr=0.1, clip=0.0), "clip"),
        (lambda p: NormalizedSGD(p, lr="fast"), "lr"),
    ],
)
def test_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make([torch.nn.Parameter(torch.tensor([0.7, 0.7]))])


def test_bad_schedule_value_is_reported_at_the_step():
    a = torch.nn.Parameter(torch.ones(2))
    opt = SMD([a], lr=lambda t: -1.0)
    a.grad = torch.ones(2)
    with pytest.raises(ValueError, match="t=1"):
        opt.step()


def test_entropy_parameters_on_the_simplex_are_accepted():
    x = torch.nn.Parameter(torch.full((2, 4), 0.25))
    SMD([x], lr=0.1, mirror="entropy")


def test_pnorm_by_name_asks_for_the_exponent():
    x = torch.nn.Parameter(torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"PNorm\(p\)"):
        SMD([x], lr=0.1, mirror="pnorm")
    opt = SMD([x], lr=0.1, mirror=PNorm(1.5))
    x.grad = torch.ones_like(x)
    opt.step()
    assert torch.isfinite(x).all()
