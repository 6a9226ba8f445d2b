"""Pieces of the experiments that decide verdicts."""

import math

import pytest

from eps_completion.experiments.recovery_vs_eps import FLOOR, _slope


@pytest.mark.parametrize("power", [1.0, 2.0, 0.5])
def test_slope_recovers_an_exact_power_law(power):
    xs = [10 ** (-3 + 0.4 * i) for i in range(7)]
    ys = [3.7 * x**power for x in xs]
    assert _slope(xs, ys) == pytest.approx(power, abs=1e-12)


def test_slope_ignores_points_below_the_floor():
    xs = [1e-3, 1e-2, 1e-1, 1.0]
    ys = [FLOOR / 10, FLOOR / 10, 1e-2, 1.0]  # the first two sit at the optimisation floor
    assert _slope(xs, ys) == pytest.approx(2.0, abs=1e-12)
    assert math.isnan(_slope(xs, [FLOOR / 2] * 4))
