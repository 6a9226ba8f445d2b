"""The synthetic experiment's measuring parts, and its registration."""

import itertools
import math
from importlib.metadata import entry_points

import pytest
import torch

from gdro_fsq.experiments import synthetic as syn
from gdro_fsq.optim import GDROFSQ, SMDFullInfo
from gdro_fsq.oracle import gdro_optimum, make_grouped_logistic
from gdro_fsq.schedules import ConstantSize


def test_checkpoints_are_increasing_and_end_at_the_budget():
    pts = syn.checkpoints(6000)
    assert pts[0] == 1 and pts[-1] == 6000
    assert all(b > a for a, b in itertools.pairwise(pts))


def test_gap_at_rounds_interpolates_a_power_law_exactly():
    res = {"rounds": [10.0, 100.0, 1000.0], "gap": [1.0, 10**-0.5, 0.1]}
    assert syn.gap_at_rounds(res, 10**1.5) == pytest.approx(10**-0.25)
    assert syn.gap_at_rounds(res, 5.0) == 1.0
    assert syn.gap_at_rounds(res, 5000.0) == 0.1


def test_run_method_spends_the_budget_and_reduces_the_gap():
    prob = make_grouped_logistic(4, 3, 20, radius=3.0, noise=0.1, seed=0)
    theta, value = gdro_optimum(prob)
    init = -theta / theta.norm() * prob.radius
    start = prob.max_risk(init) - value

    def fsq(p, gen):
        return GDROFSQ(p, prob.loss_fn, 4, radius=3.0, grad_bound=prob.grad_bound, generator=gen)

    res = syn.run_method(prob, value, fsq, ConstantSize(3, 4), 601, init, 0)
    assert res["samples"][-1] == 601 and res["rounds"][-1] == 201  # 200 rounds of 3, one of 1
    assert res["gap"][-1] < 0.5 * start
    assert all(g <= b for g, b in zip(res["gap"], res["bound"], strict=True))

    def smd(p, gen):
        return SMDFullInfo(p, prob.loss_fn, 4, lr_theta=1.0, radius=3.0, generator=gen)

    res = syn.run_method(prob, value, smd, ConstantSize(4, 4), 602, init, 0)
    assert res["samples"][-1] == 600  # no partial last round
    assert res["bound"] == []
    assert math.isfinite(res["gap"][-1])


def test_registered_as_headline_experiment():
    eps = {ep.name: ep.value for ep in entry_points(group="frontier_opt.experiments")}
    assert eps["gdro-fsq.synthetic"] == "gdro_fsq.experiments.synthetic"
    assert callable(syn.main) and torch.is_tensor(torch.zeros(1))
