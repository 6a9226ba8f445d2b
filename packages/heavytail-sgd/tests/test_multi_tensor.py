"""The foreach path of SMD against the per-parameter reference, on awkward shapes and dtypes."""

import pytest
import torch

from heavytail_sgd import SMD, Simplex
from heavytail_sgd.multi_tensor import euclidean_step_, mirror_step_, rowwise
from shared_core.mirror import Ball, Box, Euclidean, NegEntropy, PNorm

# 0-D, vectors, matrices and a 3-D tensor, with row lengths shared between tensors (7) and not
SHAPES = [(), (7,), (3, 5), (2, 3, 7), (5,), (1, 1), (4, 7)]
DTYPES = [torch.float64, torch.float32, torch.bfloat16]


def _start(shape, g, domain):
    x = torch.rand(shape, generator=g, dtype=torch.float64) + 0.1
    if domain == "simplex":
        return x / x.sum(-1, keepdim=True) if x.ndim else torch.ones(())
    if domain == "ball":  # inside the unit ball row by row
        return 0.9 * x / torch.linalg.vector_norm(x, dim=-1, keepdim=True) if x.ndim else 0.5 * x
    if domain == "box":
        return x - 0.6  # in [-0.5, 0.5)
    return x


MAPS = [
    ("euclidean", None),
    (PNorm(1.5), None),
    (PNorm(1.2, radius=50.0), None),
    ("entropy", "simplex"),
    (Euclidean(Simplex()), "simplex"),
    (Euclidean(Ball(1.0)), "ball"),
    (Euclidean(Box(-0.5, 0.5)), "box"),
]


def _run(mirror, domain, dtype, foreach, steps=4, average="uniform", lr=0.3):
    g = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter(_start(s, g, domain).to(dtype)) for s in SHAPES]
    opt = SMD(ps, lr=lr, mirror=mirror, foreach=foreach, average=average)
    grad_max = 0.0
    for _ in range(steps):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g, dtype=torch.float64).to(dtype)
            grad_max = max(grad_max, float(p.grad.abs().max()))
        opt.step()
    return [p.detach().double() for p in ps], opt.averaged_params(), grad_max


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("mirror", "domain"), MAPS, ids=lambda m: repr(m))
def test_foreach_path_equals_per_parameter_path(mirror, domain, dtype):
    steps, lr = 4, 0.3
    a, avg_a, gmax = _run(mirror, domain, dtype, foreach=True, steps=steps, lr=lr)
    b, avg_b, _ = _run(mirror, domain, dtype, foreach=False, steps=steps, lr=lr)
    # Error model. Row-wise maps: the same per-row arithmetic, only a reduction's order may
    # differ, c * d * eps relative to the row's size per step. Euclidean: x - eta g with or
    # without a fused multiply-add, at most 2 eps (|x| + eta |g|) per step. Half precisions are
    # computed in float32 by both paths and rounded once, so they may differ by one ulp of the
    # result (a float32 difference that straddles a rounding boundary).
    eps = torch.finfo(dtype).eps
    d = max(s[-1] if s else 1 for s in SHAPES)
    scale = max(float(x.abs().max()) for x in b) + steps * lr * gmax
    tol = steps * 8 * d * eps * scale if dtype != torch.bfloat16 else 2 * eps * scale
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=tol)
    for x, y in zip(avg_a, avg_b, strict=True):
        torch.testing.assert_close(x.double(), y.double(), rtol=0, atol=tol)
    assert all(p.dtype == dtype for p in avg_a)


def test_foreach_path_of_a_map_runs_the_map_once_per_row_length(monkeypatch):
    calls = []
    original = PNorm.step

    def counting(self, x, g, lr):
        calls.append(x.shape)
        return original(self, x, g, lr)

    monkeypatch.setattr(PNorm, "step", counting)
    _run(PNorm(1.5), None, torch.float64, foreach=True, steps=1)
    # row lengths among SHAPES: 1 ((), (1, 1)), 7 ((7,), (2, 3, 7), (4, 7)), 5 ((3, 5), (5,))
    assert sorted(tuple(c) for c in calls) == [(2, 1), (4, 5), (11, 7)]


def test_rowwise_refuses_maps_with_per_point_constants():
    assert rowwise(PNorm(1.5)) and rowwise(NegEntropy()) and rowwise(Euclidean())
    assert rowwise(Euclidean(Ball(1.0))) and rowwise(Euclidean(Box(-1.0, 1.0)))
    assert not rowwise(Euclidean(Ball(1.0, center=torch.zeros(3))))
    assert not rowwise(Euclidean(Box(torch.zeros(3), torch.ones(3))))

    class Mine(PNorm):
        pass

    assert not rowwise(Mine(1.5))


def test_tensor_centred_ball_falls_back_and_matches():
    centre = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    out = []
    for foreach in (True, False):
        x = torch.nn.Parameter(centre + torch.tensor([0.5, 0.0, 0.0], dtype=torch.float64))
        opt = SMD([x], lr=1.0, mirror=Euclidean(Ball(1.0, center=centre)), foreach=foreach)
        x.grad = torch.tensor([-3.0, 0.0, 0.0], dtype=torch.float64)
        opt.step()
        out.append(x.detach())
    assert torch.equal(out[0], out[1])
    torch.testing.assert_close(out[0], centre + torch.tensor([1.0, 0.0, 0.0]))


def test_euclidean_step_in_half_precision_does_not_round_the_step_size():
    # torch's bf16 add_(g, alpha=-eta) rounds eta to bf16 first (1 + 0.6 * 2^-7 becomes
    # 1 + 2^-7), which moves -3 eta to the far bf16 neighbour; the foreach path steps in
    # float32 and rounds the result once, as the float64 reference rounded to bf16.
    eta = 1 + 0.6 * 2**-7
    g = torch.tensor([3.0, 5.0, 7.0, 1.0], dtype=torch.bfloat16)
    x = torch.zeros(4, dtype=torch.bfloat16)
    euclidean_step_([x], [g], eta)
    assert torch.equal(x, (-eta * g.double()).bfloat16())
    naive = torch.zeros(4, dtype=torch.bfloat16).add_(g, alpha=-eta)
    assert not torch.equal(naive, x)  # the case does discriminate


def test_mirror_step_shapes_and_dtypes_are_kept():
    xs = [torch.full((2, 3), 1 / 3, dtype=torch.float32), torch.full((3,), 1 / 3)]
    gs = [torch.zeros(2, 3), torch.tensor([1.0, 0.0, 0.0])]
    mirror_step_(NegEntropy(), xs, gs, 0.5)
    assert xs[0].shape == (2, 3) and torch.allclose(xs[0], torch.full((2, 3), 1 / 3))
    assert xs[1][0] < xs[1][1] and abs(float(xs[1].sum()) - 1) < 1e-6
