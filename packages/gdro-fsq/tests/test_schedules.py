"""Sample-size schedules: values, range, determinism, bad input."""

import itertools

import pytest

from gdro_fsq.schedules import CallbackSize, ConstantSize, IncreasingSize, RandomSize


def test_constant():
    s = ConstantSize(4, n_groups=10)
    assert [s(t) for t in (1, 5, 100)] == [4, 4, 4]


def test_increasing_is_monotone_capped_and_hand_values():
    s = IncreasingSize(start=2, growth=1.0, n_groups=5)
    vals = [s(t) for t in range(1, 200)]
    assert vals[:4] == [2, 3, 3, 4]  # 2 + floor(log2(1 + t - 1))
    assert all(b >= a for a, b in itertools.pairwise(vals))
    assert max(vals) == 5


def test_random_range_and_determinism():
    s = RandomSize(2, 4, n_groups=6, seed=3)
    vals = [s(t) for t in range(1, 300)]
    assert set(vals) == {2, 3, 4}
    assert vals == [RandomSize(2, 4, n_groups=6, seed=3)(t) for t in range(1, 300)]
    assert vals != [RandomSize(2, 4, n_groups=6, seed=4)(t) for t in range(1, 300)]


def test_callback_checks_its_values():
    s = CallbackSize(lambda t: t, n_groups=3)
    assert s(2) == 2
    with pytest.raises(ValueError, match=r"\[1, 3\]"):
        s(4)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: ConstantSize(0, n_groups=3), "r_t"),
        (lambda: ConstantSize(4, n_groups=3), "r_t"),
        (lambda: IncreasingSize(1, 0.0, n_groups=3), "growth"),
        (lambda: RandomSize(3, 2, n_groups=3), "low must be"),
        (lambda: CallbackSize(3, n_groups=3), "callable"),
    ],
)
def test_bad_schedules(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_rounds_count_from_one():
    with pytest.raises(ValueError, match="from 1"):
        ConstantSize(1, n_groups=2)(0)
