"""SegreSGD: the Riemannian gradient from factor autograd equals the problem's (two routes),
a momentum-free step is the manifold's retraction of it, it converges, validates its
arguments, and round-trips its state."""

from __future__ import annotations

import pytest
import torch

from segre import RecoveryProblem, gaussian_sensing, random_rank_one
from segre.optim import SegreSGD, rank_one_parameters
from shared_core.manifolds import Segre, SegreTangent

F64 = torch.float64
DIMS = (4, 3, 5)


def setup(seed=0):
    g = torch.Generator().manual_seed(seed)
    x_true = random_rank_one(DIMS, generator=g)
    op = gaussian_sensing(DIMS, 40, generator=g)
    prob = RecoveryProblem(op, op.forward(x_true.scale, x_true.factors))
    x0 = random_rank_one(DIMS, scale=1.3, generator=g)
    A = op.to_matrix()

    def loss_of(params):
        X = params[0] * torch.einsum("a,b,c->abc", *params[1:])
        return 0.5 * ((A @ X.reshape(-1) - prob.y) ** 2).sum()

    return prob, x0, loss_of, x_true


def test_one_step_is_the_retraction_of_the_riemannian_gradient():
    prob, x0, loss_of, _ = setup()
    params = rank_one_parameters(x0)
    opt = SegreSGD(params, lr=1e-3)
    loss_of(params).backward()
    opt.step()
    man = Segre(DIMS)
    g = prob.rgrad(x0)  # route 2: the operator's adjoint contractions
    ref = man.retr(x0, SegreTangent(-1e-3 * g.scale, tuple(-1e-3 * w for w in g.vecs)))
    assert torch.allclose(params[0].detach(), ref.scale, rtol=1e-12, atol=0)
    for p, u in zip(params[1:], ref.factors, strict=True):
        assert torch.allclose(p.detach(), u, rtol=0, atol=1e-12)


def test_momentum_converges_and_state_round_trips():
    _, x0, loss_of, _ = setup(1)
    params = rank_one_parameters(x0)
    opt = SegreSGD(params, lr=0.01, momentum=0.5)
    for _ in range(5):
        opt.zero_grad()
        loss_of(params).backward()
        opt.step()
    twin = rank_one_parameters(random_rank_one(DIMS))
    for p, q in zip(twin, params, strict=True):
        p.data.copy_(q.data)
    opt2 = SegreSGD(twin, lr=0.01, momentum=0.5)
    opt2.load_state_dict(opt.state_dict())
    for _ in range(3):
        for o, ps in ((opt, params), (opt2, twin)):
            o.zero_grad()
            loss_of(ps).backward()
            o.step()
    for p, q in zip(params, twin, strict=True):
        assert torch.equal(p, q)
    for _ in range(400):
        opt.zero_grad()
        loss = loss_of(params)
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 1e-16


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": 0.0}, "lr"),
        ({"lr": 0.1, "momentum": 1.0}, "momentum"),
        ({"lr": 0.1, "retraction": "qr"}, "retraction"),
    ],
)
def test_bad_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SegreSGD(rank_one_parameters(random_rank_one(DIMS)), **kwargs)


def test_bad_parameters_raise():
    x = random_rank_one(DIMS)
    params = rank_one_parameters(x)
    with pytest.raises(ValueError, match="d >= 2"):
        SegreSGD(params[:2], lr=0.1)
    params[0].data.zero_()
    with pytest.raises(ValueError, match="zero tensor"):
        SegreSGD(params, lr=0.1)
    params = rank_one_parameters(x)
    params[1].data.mul_(2.0)
    with pytest.raises(ValueError, match="not a rank-one point"):
        SegreSGD(params, lr=0.1)
