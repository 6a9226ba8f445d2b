r"""Per-round sample-size schedules :math:`t \mapsto r_t \in [1, m]`.

Every schedule is a callable of the 1-based round ``t`` returning an int; the optimizer
checks the value against ``[1, m]`` each round.

Example:
    >>> [IncreasingSize(start=1, growth=1.0, n_groups=4)(t) for t in range(1, 7)]
    [1, 2, 2, 3, 3, 3]
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable

import torch

from .sampling import check_sample_size

__all__ = ["CallbackSize", "ConstantSize", "IncreasingSize", "RandomSize", "SizeSchedule"]


class SizeSchedule(ABC):
    """A map from the round ``t >= 1`` to the number of groups ``r_t`` queried then."""

    @abstractmethod
    def __call__(self, t: int) -> int:
        """The sample size of round ``t``."""


def _check_t(t: int) -> int:
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        raise ValueError(f"rounds are counted from 1, got t={t!r}")
    return t


class ConstantSize(SizeSchedule):
    """``r_t = r`` for every round.

    Example:
        >>> ConstantSize(3, n_groups=5)(10)
        3
    """

    def __init__(self, r: int, n_groups: int) -> None:
        self.r = check_sample_size(r, n_groups)

    def __call__(self, t: int) -> int:
        _check_t(t)
        return self.r


class IncreasingSize(SizeSchedule):
    r""":math:`r_t = \min(m,\ \text{start} + \lfloor\log_2(1 + \text{growth}\cdot(t-1))\rfloor)`:
    one more group each time ``1 + growth * (t - 1)`` doubles, up to ``m``.

    Args:
        start: ``r_1`` (at least 1).
        growth: how fast it grows (> 0).
        n_groups: the cap ``m``.
    """

    def __init__(self, start: int, growth: float, n_groups: int) -> None:
        self.start = check_sample_size(start, n_groups)
        if not (isinstance(growth, int | float) and math.isfinite(growth) and growth > 0):
            raise ValueError(f"growth must be a finite number > 0, got {growth!r}")
        self.growth = float(growth)
        self.n_groups = n_groups

    def __call__(self, t: int) -> int:
        _check_t(t)
        extra = math.floor(math.log2(1 + self.growth * (t - 1)))
        return min(self.n_groups, self.start + extra)


class RandomSize(SizeSchedule):
    """``r_t`` uniform on ``{low, ..., high}``, drawn from its own seeded generator.

    The value for round ``t`` depends only on the seed and ``t`` (it is re-drawn from a generator
    seeded with ``(seed, t)``), so the schedule can be queried in any order.

    Example:
        >>> s = RandomSize(1, 4, n_groups=4, seed=0)
        >>> [s(t) for t in (1, 2, 3)] == [s(t) for t in (1, 2, 3)]
        True
    """

    def __init__(self, low: int, high: int, n_groups: int, seed: int = 0) -> None:
        self.low = check_sample_size(low, n_groups)
        self.high = check_sample_size(high, n_groups)
        if self.low > self.high:
            raise ValueError(f"low must be <= high, got low={low}, high={high}")
        self.seed = int(seed)

    def __call__(self, t: int) -> int:
        _check_t(t)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + t)
        return int(torch.randint(self.low, self.high + 1, (), generator=g))


class CallbackSize(SizeSchedule):
    """Any user function ``t -> r_t``, checked against ``[1, m]`` on every call.

    Example:
        >>> CallbackSize(lambda t: 1 + t % 2, n_groups=3)(3)
        2
    """

    def __init__(self, fn: Callable[[int], int], n_groups: int) -> None:
        if not callable(fn):
            raise ValueError(f"the callback must be callable, got {fn!r}")
        self.fn = fn
        self.n_groups = n_groups

    def __call__(self, t: int) -> int:
        return check_sample_size(self.fn(_check_t(t)), self.n_groups)
