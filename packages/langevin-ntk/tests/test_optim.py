"""torch.optim conventions of ``Langevin``: seeding, state_dict, groups, T = 0, bad input."""

import copy

import pytest
import torch

from langevin_ntk import MLP, Langevin


def _model(seed=0):
    return MLP(5, 17, 3, "tanh", generator=torch.Generator().manual_seed(seed))


def _train(model, opt, steps, x, y):
    for _ in range(steps):
        opt.step(lambda: _closure(model, opt, x, y))


def _closure(model, opt, x, y):
    opt.zero_grad()
    loss = 0.5 * ((model(x) - y) ** 2).sum()
    loss.backward()
    return loss


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(9, 5, generator=g), torch.randn(9, generator=g)


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_same_seed_replays_exactly_and_other_seed_differs():
    x, y = _data()
    runs = []
    for seed in (3, 3, 4):
        m = _model()
        _train(
            m,
            Langevin(m.parameters(), lr=0.01, temperature=0.1, weight_decay=0.2, seed=seed),
            10,
            x,
            y,
        )
        runs.append(_flat(m))
    assert torch.equal(runs[0], runs[1])
    assert not torch.allclose(runs[0], runs[2])


def test_global_seed_replays_when_no_seed_given():
    x, y = _data()
    out = []
    for _ in range(2):
        torch.manual_seed(123)
        m = _model()
        _train(m, Langevin(m.parameters(), lr=0.01, temperature=0.1), 5, x, y)
        out.append(_flat(m))
    assert torch.equal(out[0], out[1])


def test_state_dict_round_trip_continues_the_noise_stream():
    x, y = _data()
    m = _model()
    opt = Langevin(m.parameters(), lr=0.01, temperature=0.2, weight_decay=0.1, scheme="ou", seed=9)
    _train(m, opt, 4, x, y)
    saved_model = copy.deepcopy(m.state_dict())
    saved_opt = copy.deepcopy(opt.state_dict())
    _train(m, opt, 6, x, y)
    ref = _flat(m)

    m2 = _model(seed=5)  # different weights, overwritten by the load
    m2.load_state_dict(saved_model)
    opt2 = Langevin(m2.parameters(), lr=0.5, temperature=0.0, seed=0)  # overwritten too
    opt2.load_state_dict(saved_opt)
    assert opt2.param_groups[0]["temperature"] == 0.2 and opt2.param_groups[0]["scheme"] == "ou"
    _train(m2, opt2, 6, x, y)
    assert torch.equal(_flat(m2), ref)
    assert opt2.state[next(iter(m2.parameters()))]["step"] == 10


def test_load_state_dict_rejects_a_foreign_dict():
    m = _model()
    sgd = torch.optim.SGD(m.parameters(), lr=0.1)
    opt = Langevin(m.parameters(), lr=0.1, temperature=0.1, seed=0)
    with pytest.raises(ValueError, match="not a Langevin state_dict"):
        opt.load_state_dict(sgd.state_dict())


def test_temperature_zero_equals_sgd_with_coupled_weight_decay():
    x, y = _data()
    m1, m2 = _model(), _model()
    _train(
        m1, Langevin(m1.parameters(), lr=0.02, temperature=0.0, weight_decay=0.3, seed=0), 8, x, y
    )
    _train(m2, torch.optim.SGD(m2.parameters(), lr=0.02, weight_decay=0.3), 8, x, y)
    assert torch.allclose(_flat(m1), _flat(m2), rtol=1e-6, atol=1e-7)


def test_param_groups_and_none_grads():
    a = torch.nn.Parameter(torch.zeros(4))
    b = torch.nn.Parameter(torch.zeros(4))
    c = torch.nn.Parameter(torch.ones(4))  # never gets a gradient
    opt = Langevin(
        [{"params": [a], "temperature": 0.0}, {"params": [b, c], "temperature": 1.0}],
        lr=0.1,
        temperature=0.5,
        seed=1,
    )
    (a.sum() + b.sum()).backward()
    loss = opt.step()
    assert loss is None
    assert torch.allclose(a.detach(), torch.full((4,), -0.1))  # no noise at T = 0
    assert not torch.allclose(b.detach(), torch.full((4,), -0.1))  # noise at T = 1
    assert torch.equal(c.detach(), torch.ones(4))  # skipped: grad is None
    assert c not in opt.state


def test_float64_and_bfloat16_parameters():
    for dtype in (torch.float64, torch.bfloat16):
        p = torch.nn.Parameter(torch.zeros(6, dtype=dtype))
        opt = Langevin([p], lr=0.1, temperature=0.1, seed=0)
        p.sum().backward()
        opt.step()
        assert p.dtype == dtype and bool(torch.isfinite(p).all())


def test_nonfinite_gradient_raises_and_changes_nothing():
    p = torch.nn.Parameter(torch.ones(3))
    opt = Langevin([p], lr=0.1, temperature=0.1, seed=0)
    p.grad = torch.tensor([1.0, float("nan"), 0.0])
    with pytest.raises(FloatingPointError):
        opt.step()
    assert torch.equal(p.detach(), torch.ones(3))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": 0.0}, "lr"),
        ({"lr": -0.1}, "lr"),
        ({"temperature": -1.0}, "temperature 0 is plain gradient descent"),
        ({"temperature": float("inf")}, "temperature"),
        ({"weight_decay": -1e-3}, "weight_decay"),
        ({"scheme": "milstein"}, "scheme"),
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_constructor_bad_input(kwargs, match):
    args = {"lr": 0.1, "temperature": 0.1}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        Langevin([torch.nn.Parameter(torch.zeros(2))], **args)


def test_bad_group_value_is_rejected():
    with pytest.raises(ValueError, match="temperature"):
        Langevin(
            [{"params": [torch.nn.Parameter(torch.zeros(2))], "temperature": -0.5}],
            lr=0.1,
            temperature=0.1,
        )
    p = torch.nn.Parameter(torch.zeros(2))
    opt = Langevin([p], lr=0.1, temperature=0.1)
    opt.param_groups[0]["weight_decay"] = -1.0  # changed after construction
    p.grad = torch.zeros(2)
    with pytest.raises(ValueError, match="weight_decay"):
        opt.step()


def test_temperature_is_required():
    with pytest.raises(TypeError):
        Langevin([torch.nn.Parameter(torch.zeros(2))], lr=0.1)  # type: ignore[call-arg]
