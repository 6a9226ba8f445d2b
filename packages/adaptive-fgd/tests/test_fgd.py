"""The adaptive rule, the merged iterate, the user-facing class and its bad-input checks."""

import itertools
import math

import pytest
import torch

from adaptive_fgd import (
    AdaptiveFGD,
    KernelCentres,
    NestedRidge,
    RandomFourierFeatures,
    RepresentationCapError,
    refine_until,
)
from adaptive_fgd.functional import guaranteed_decrease, relative_error, step_size


def _data(n=400, seed=0, freq=6.0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 2, generator=gen) * 2 - 1
    y = torch.sin(freq * x[:, :1]) * torch.cos(3 * x[:, 1:]) + 0.3 * x[:, :1]
    return x, y


@pytest.mark.parametrize("family", ["rff", "kernel"])
def test_adaptive_rule_meets_delta_on_held_out_points(family):
    # 640 fit points, cap 256: the cap is met near loss 1e-5 (rff) / 1e-6 (kernel); stop before
    x, y = _data(n=800)
    fam = (
        RandomFourierFeatures(2, 0.4, cap=256, seed=2)
        if family == "rff"
        else KernelCentres(2, 0.3, cap=256)
    )
    fgd = AdaptiveFGD(fam, delta=0.3, start_size=4, seed=1).fit(x, y, steps=7)
    errs = [r.rel_error for r in fgd.history]
    assert all(e <= 0.3 for e in errs)
    assert all(r.met for r in fgd.history)
    assert max(r.size for r in fgd.history) > 4  # the rule had to refine
    assert any(r.tries > 1 for r in fgd.history)
    losses = [r.loss for r in fgd.history]
    assert all(b < a for a, b in itertools.pairwise(losses))  # monotone descent


def test_refine_until_generalises_to_fresh_points():
    # the held-out estimate is an estimate of the error over the whole distribution: on fresh
    # points from the same law it stays near delta (a 2000-point Monte-Carlo: ~3% spread).
    x, y = _data(n=3000, seed=3)
    fresh_x, fresh_y = _data(n=2000, seed=4)
    g = -y  # gradient of the squared loss at f = 0
    fam = RandomFourierFeatures(2, 0.4, cap=1024, seed=0)
    fit, chk = slice(0, 2400), slice(2400, 3000)
    res = refine_until(
        fam, NestedRidge(1e-8), x[fit], g[fit], g[chk], lambda m: fam.features(x[chk], m), 0.1, 2
    )
    assert res.met and res.rel_error <= 0.1 and res.tries > 1
    fresh = relative_error(fam.features(fresh_x, res.size) @ res.coefficients, -fresh_y)
    assert fresh <= 0.1 * 1.25


def test_merged_iterate_equals_sum_of_step_values():
    # route 1: values updated step by step on the sample; route 2: one pass over the merged
    # coefficients. Equal to rounding (T steps, each ~1e-16 relative).
    x, y = _data(n=300, seed=5)
    fgd = AdaptiveFGD(KernelCentres(2, 0.3, cap=200), delta=0.4, start_size=4, on_cap="record")
    fgd.fit(x, y, steps=30)
    torch.testing.assert_close(fgd.predict(x), fgd.sample_values, rtol=0, atol=1e-9)
    assert fgd.size <= 200


def test_linear_rate_under_pl_matches_theory_for_squared_loss():
    # squared loss in L2(mu): L = m = 1, so R_{t+1} <= (1 - ((1-d)/(1+d))^2) R_t whenever the
    # condition holds on the whole sample. The held-out check is an estimate, so test the steps
    # where the full-sample error also met delta.
    x, y = _data(n=800, seed=6)
    d = 0.3
    fgd = AdaptiveFGD(RandomFourierFeatures(2, 0.4, cap=256, seed=3), delta=d, on_cap="record")
    fgd.fit(x, y, steps=12)
    rate = 1 - ((1 - d) / (1 + d)) ** 2
    prev = 0.5 * float((y**2).mean())
    checked = 0
    for r in fgd.history:
        if r.rel_error_full <= d:
            assert r.loss <= rate * prev * (1 + 1e-9)
            checked += 1
        prev = r.loss
    assert checked >= 6


def test_logistic_loss_decreases_and_default_lr_is_theory_step():
    # separable labels: the logistic minimiser is at infinity and the gradient concentrates on
    # the boundary, so a capped family meets delta only for the first steps (4 here).
    x, _ = _data(n=600, seed=7)
    y = torch.where(x[:, :1] + 0.5 * x[:, 1:] > 0, 1.0, -1.0)
    fgd = AdaptiveFGD(RandomFourierFeatures(2, 0.5, cap=256, seed=0), loss="logistic", delta=0.5)
    assert math.isclose(fgd.lr, step_size(0.25, 0.5))
    fgd.fit(x, y, steps=4)
    losses = [math.log(2)] + [r.loss for r in fgd.history]
    assert all(b < a for a, b in itertools.pairwise(losses))
    assert losses[-1] < 0.35


@pytest.mark.parametrize("k", [3, 5])
def test_softmax_steps_meet_the_descent_guarantee(k):
    # k classes with soft labels p(x) = softmax(smooth logits): the gradient p(f) - p(x) is
    # smooth, so the rule can meet delta; on every step whose whole-sample error met delta the
    # decrease is at least the descent lemma's (1-d)^2 / (2L(1+d)^2) |g|^2 with L = 1/2
    # (an independent check of the loss's gradient, its smoothness constant and the step).
    gen = torch.Generator().manual_seed(k)
    x = torch.rand(700, 2, generator=gen) * 2 - 1
    a = torch.randn(2, k, generator=gen)
    y = torch.softmax(2 * torch.sin(2 * x @ a), dim=1)
    d = 0.3
    fgd = AdaptiveFGD(KernelCentres(2, 0.3, cap=256), loss="softmax", delta=d, on_cap="record")
    assert math.isclose(fgd.lr, step_size(0.5, d))
    fgd.fit(x, y, steps=10)
    prev, checked = math.log(k), 0
    for r in fgd.history:
        if r.rel_error_full <= d:
            bound = guaranteed_decrease(0.5, d, fgd.lr, r.grad_norm_sq)
            assert prev - r.loss >= bound * (1 - 1e-9)
            checked += 1
        prev = r.loss
    assert checked >= 5
    assert fgd.history[0].met and fgd.predict(x).shape == (700, k)
    # the iterate is a logit function: its softmax approaches the label distribution
    assert float((torch.softmax(fgd.predict(x), 1) - y).abs().mean()) < 0.05


def test_fixed_size_baseline_never_changes_size_and_never_raises():
    x, y = _data(n=300, seed=8, freq=12.0)
    fgd = AdaptiveFGD(
        RandomFourierFeatures(2, 0.4, cap=256), adaptive=False, start_size=8, delta=0.1
    )
    fgd.fit(x, y, steps=10)
    assert {r.size for r in fgd.history} == {8}
    assert not all(r.met for r in fgd.history)  # 8 features cannot meet 0.1 here


def test_cap_too_small_raises_with_achieved_error():
    x, y = _data(n=300, seed=9, freq=12.0)
    fgd = AdaptiveFGD(RandomFourierFeatures(2, 0.4, cap=4), delta=0.05, start_size=2)
    with pytest.raises(
        RepresentationCapError,
        match=r"cap 4 reached at step 0 \(the family cannot grow further\) with relative",
    ) as err:
        fgd.fit(x, y, steps=3)
    assert err.value.achieved > 0.05 and err.value.cap == 4
    # on_cap="record" continues, but says so in the history
    fgd = AdaptiveFGD(
        RandomFourierFeatures(2, 0.4, cap=4), delta=0.05, start_size=2, on_cap="record"
    )
    fgd.fit(x, y, steps=3)
    assert [r.met for r in fgd.history] == [False] * 3


def test_non_finite_loss_is_an_error():
    x, y = _data(n=100)
    fgd = AdaptiveFGD(RandomFourierFeatures(2, 0.4, cap=64), lr=1e308, delta=0.5, on_cap="record")
    with pytest.raises(ValueError, match="non-finite"):
        fgd.fit(x, 1e10 * y, steps=5)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"delta": -0.5}, "delta"),
        ({"lr": -1.0}, "lr"),
        ({"lr": math.nan}, "lr"),
        ({"start_size": 0}, "start_size"),
        ({"start_size": 100}, "cap"),
        ({"growth": 1.0}, "growth"),
        ({"holdout": 1.0}, "holdout"),
        ({"coarsen_below": 1.0}, "coarsen_below"),
        ({"loss": "hinge"}, "loss"),
        ({"on_cap": "ignore"}, "on_cap"),
        ({"ridge": -1.0}, "ridge"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AdaptiveFGD(RandomFourierFeatures(2, 0.4, cap=64), **kwargs)


def test_fit_rejects_bad_data():
    fgd = AdaptiveFGD(RandomFourierFeatures(2, 0.4, cap=64))
    with pytest.raises(ValueError, match="empty"):
        fgd.fit(torch.zeros(0, 2), torch.zeros(0), steps=1)
    with pytest.raises(ValueError, match="two points"):
        fgd.fit(torch.zeros(1, 2), torch.zeros(1), steps=1)
    with pytest.raises(ValueError, match="shape"):
        fgd.fit(torch.zeros(5, 3), torch.zeros(5), steps=1)
    with pytest.raises(ValueError, match="y must"):
        fgd.fit(torch.zeros(5, 2), torch.zeros(4), steps=1)
    with pytest.raises(ValueError, match="finite"):
        fgd.fit(torch.zeros(5, 2), torch.tensor([0, 1, math.nan, 0, 0.0]), steps=1)
    with pytest.raises(ValueError, match="steps"):
        fgd.fit(torch.zeros(5, 2), torch.zeros(5), steps=-1)
    with pytest.raises(ValueError, match="labels"):
        AdaptiveFGD(RandomFourierFeatures(2, 0.4, cap=64), loss="logistic").fit(
            torch.rand(5, 2), torch.tensor([0.0, 1, 1, -2, 1]), steps=1
        )
    soft = AdaptiveFGD(RandomFourierFeatures(2, 0.4, cap=64), loss="softmax")
    for bad in ([[0.5, 0.6]] * 5, [[1.5, -0.5]] * 5, [[1.0]] * 5):
        with pytest.raises(ValueError, match="probability vector"):
            soft.fit(torch.rand(5, 2), torch.tensor(bad), steps=1)
    with pytest.raises(RuntimeError, match="fit"):
        AdaptiveFGD(RandomFourierFeatures(2, 0.4, cap=64)).step()
    with pytest.raises(ValueError, match="FeatureFamily"):
        AdaptiveFGD("rff")


def test_family_that_runs_out_of_points_raises_instead_of_looping():
    # 40 points, 32 fit points: kernel centres can never exceed 32 although the cap is 1000
    x, y = _data(n=40, seed=10, freq=12.0)
    fgd = AdaptiveFGD(KernelCentres(2, 0.05, cap=1000), delta=0.01, start_size=2)
    with pytest.raises(RepresentationCapError, match="cap 32 reached") as err:
        fgd.fit(x, y, steps=2)
    assert err.value.achieved > 0.01
