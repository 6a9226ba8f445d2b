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
    assert len(res["bound_hp"]) == len(res["gap"])
    assert syn.bound_holds([res], "bound") and syn.bound_holds([res], "bound_hp")

    def smd(p, gen):
        return SMDFullInfo(p, prob.loss_fn, 4, lr_theta=1.0, radius=3.0, generator=gen)

    res = syn.run_method(prob, value, smd, ConstantSize(4, 4), 602, init, 0)
    assert res["samples"][-1] == 600  # no partial last round
    assert res["bound"] == [] and res["bound_hp"] == []
    assert not syn.bound_holds([res], "bound_hp")  # a run without the bound cannot pass
    assert math.isfinite(res["gap"][-1])


def test_bound_holds_rule():
    ok = {"gap": [0.5, 0.1], "bound": [0.6, 0.1]}
    bad = {"gap": [0.5, 0.2], "bound": [0.6, 0.1]}
    assert syn.bound_holds([ok], "bound")
    assert not syn.bound_holds([ok, bad], "bound")


def test_registered_as_headline_experiment():
    eps = {ep.name: ep.value for ep in entry_points(group="frontier_opt.experiments")}
    assert eps["gdro-fsq.synthetic"] == "gdro_fsq.experiments.synthetic"
    assert callable(syn.main) and torch.is_tensor(torch.zeros(1))


def test_real_data_split_and_group_accuracy():
    pytest.importorskip("sklearn")
    from gdro_fsq.experiments import real

    train, test = real.load_digits_parity(seed=3)
    assert train.n_groups == test.n_groups == 10
    assert train.X.shape[0] + test.X.shape[0] == 1797
    assert float(train.X.norm(dim=1).max()) <= 1 + 1e-12
    for part in (train, test):
        counts = torch.bincount(part.groups, minlength=10)
        assert int(counts.min()) > 0
        # the label is the parity of the group (the digit)
        assert torch.equal(part.y, (part.groups % 2).to(part.y.dtype) * 2 - 1)
    ratio = torch.bincount(test.groups, minlength=10) / torch.bincount(train.groups, minlength=10)
    assert bool(((ratio > 0.45) & (ratio < 0.55)).all())  # a 2:1 split inside every group
    gen = torch.Generator().manual_seed(0)
    theta = torch.randn(train.dim, generator=gen, dtype=torch.float64)
    acc = real.group_accuracy(test, theta)
    for i in range(10):
        rows_i = test.groups == i
        pred = [1.0 if float(x @ theta) > 0 else -1.0 for x in test.X[rows_i]]
        brute = sum(p == float(t) for p, t in zip(pred, test.y[rows_i], strict=True)) / len(pred)
        assert float(acc[i]) == pytest.approx(brute, abs=1e-12)
