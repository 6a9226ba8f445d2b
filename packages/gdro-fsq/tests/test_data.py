"""GroupSampler: draws from the right groups, determinism, bad input."""

import pytest
import torch

from gdro_fsq.data import GroupSampler


def _data():
    X = torch.arange(20.0).reshape(10, 2)
    y = torch.arange(10.0)
    g = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 2])
    return X, y, g


def test_samples_come_from_the_requested_groups():
    X, y, g = _data()
    s = GroupSampler(X, y, g, generator=torch.Generator().manual_seed(0))
    for _ in range(50):
        b = s.sample(torch.tensor([2, 0]))
        assert b.group.tolist() == [2, 0]
        rows = b.y.long()
        assert g[rows].tolist() == [2, 0]
        torch.testing.assert_close(b.X, X[rows])


def test_each_member_is_drawn_uniformly():
    X, y, g = _data()
    s = GroupSampler(X, y, g, generator=torch.Generator().manual_seed(1))
    n = 8000
    rows = torch.stack([s.sample(torch.tensor([2])).y.long()[0] for _ in range(n)])
    freq = torch.bincount(rows, minlength=10)[s.members(2)] / n
    assert bool(((freq - 0.25).abs() < 5 * (0.25 * 0.75 / n) ** 0.5).all())


def test_determinism():
    X, y, g = _data()
    a = GroupSampler(X, y, g, generator=torch.Generator().manual_seed(5))
    b = GroupSampler(X, y, g, generator=torch.Generator().manual_seed(5))
    ids = torch.tensor([0, 1, 2])
    for _ in range(10):
        torch.testing.assert_close(a.sample(ids).X, b.sample(ids).X)


def test_bad_inputs():
    X, y, g = _data()
    with pytest.raises(ValueError, match="empty groups: \\[3\\]"):
        GroupSampler(X, y, g, n_groups=4)
    with pytest.raises(ValueError, match="lie in"):
        GroupSampler(X, y, torch.where(g == 2, -1, g))
    with pytest.raises(ValueError, match="lie in"):
        GroupSampler(X, y, g, n_groups=2)
    with pytest.raises(ValueError, match="integers"):
        GroupSampler(X, y, g.double())
    with pytest.raises(ValueError, match="same length"):
        GroupSampler(X[:5], y, g)
    s = GroupSampler(X, y, g)
    with pytest.raises(ValueError, match="lie in"):
        s.sample(torch.tensor([3]))
