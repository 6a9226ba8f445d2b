"""Per-example margin gradients (vmap + grad) vs a per-example autograd loop; bad outputs."""

import pytest
import torch
from torch import nn

from trak_theory.gradients import margin, out_to_loss, per_example_grads


def _net(gen, dtype=torch.float64):
    torch.manual_seed(int(torch.randint(0, 10**6, (1,), generator=gen)))
    return nn.Sequential(nn.Linear(7, 5), nn.Tanh(), nn.Linear(5, 4)).to(dtype)


def test_margin_is_log_odds_of_the_correct_class(gen):
    logits = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    y = torch.tensor([0, 3, 1, 2, 2, 0])
    p = torch.softmax(logits, -1)[torch.arange(6), y]
    got = torch.stack([margin(logits[i], y[i]) for i in range(6)])
    torch.testing.assert_close(got, torch.log(p / (1 - p)))


def test_per_example_grads_match_autograd_loop(gen):
    net = _net(gen)
    x = torch.randn(13, 7, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 4, (13,), generator=gen)
    got = per_example_grads(net, x, y, chunk_size=5)
    rows = []
    for i in range(13):
        net.zero_grad()
        margin(net(x[i : i + 1])[0], y[i]).backward()
        rows.append(torch.cat([p.grad.flatten() for p in net.parameters()]))
    torch.testing.assert_close(got, torch.stack(rows))


def test_out_to_loss(gen):
    net = _net(gen)
    x = torch.randn(9, 7, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 4, (9,), generator=gen)
    want = 1 - torch.softmax(net(x), -1)[torch.arange(9), y]
    torch.testing.assert_close(out_to_loss(net, x, y), want.detach())


def test_non_differentiable_output_is_refused(gen):
    net = _net(gen)
    x = torch.randn(3, 7, generator=gen, dtype=torch.float64)
    y = torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match="not differentiable"):
        per_example_grads(net, x, y, output_fn=lambda out, lab: out.argmax())
    with pytest.raises(ValueError, match="does not depend"):
        per_example_grads(net, x, y, output_fn=lambda out, lab: out.detach().sum())


def test_nan_gradients_and_empty_batches_are_refused(gen):
    net = _net(gen)
    x = torch.randn(4, 7, generator=gen, dtype=torch.float64)
    x[2, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        per_example_grads(net, x, torch.tensor([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="empty"):
        per_example_grads(net, x[:0], torch.tensor([], dtype=torch.long))
    with pytest.raises(ValueError, match="examples"):
        per_example_grads(net, x[:3], torch.tensor([0, 1]))


def test_all_finite_against_elementwise(gen):
    from trak_theory.gradients import all_finite

    for bad in (float("nan"), float("inf"), -float("inf"), None):
        a = torch.randn(37, 53, generator=gen)
        if bad is not None:
            a[int(torch.randint(0, 37, (1,), generator=gen)), 11] = bad
        assert all_finite(a) == bool(torch.isfinite(a).all())
    big = torch.full((5, 7), 3e38)  # the sum overflows, yet every entry is finite
    assert not bool(torch.isfinite(big.sum()))
    assert all_finite(big)
