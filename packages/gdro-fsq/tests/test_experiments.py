"""The synthetic experiment's measuring parts, and its registration."""

import itertools
import math
from importlib.metadata import entry_points

import pytest
import torch

from gdro_fsq.experiments import synthetic as syn
from gdro_fsq.experiments import verdicts as verdicts_mod
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


def test_paired_ratio_test_against_scipy_and_by_hand():
    """The equal-samples rule: refuted iff the one-sided paired t-test rejects ratio <= 1.1."""
    stats = pytest.importorskip("scipy.stats")
    gen = torch.Generator().manual_seed(11)
    for n, shift in [(2, 0.0), (5, 0.9), (7, 0.2), (9, -0.5), (13, 0.35)]:
        base = (torch.rand(n, generator=gen, dtype=torch.float64) + 0.1).tolist()
        noise = 0.3 * torch.randn(n, generator=gen, dtype=torch.float64)
        gaps = [b * math.exp(shift + float(e)) for b, e in zip(base, noise, strict=True)]
        res = syn.paired_ratio_test(gaps, base)
        d = [math.log(a / b) for a, b in zip(gaps, base, strict=True)]
        p_high = stats.ttest_1samp(d, math.log(1.1), alternative="greater").pvalue
        assert res["refuted"] == (p_high < 0.05)
        p_low = stats.ttest_1samp(d, math.log(1.1), alternative="less").pvalue
        assert res["shown"] == (p_low <= 0.05)
        assert res["ratio"] == pytest.approx(math.exp(sum(d) / n), rel=1e-12)
        assert res["lo"] < res["ratio"] < res["hi"] and res["n"] == n
    # by hand, n = 2: d = (log 2, log 4), mean 1.5 log 2, sd log 2 / sqrt 2, t_{0.95,1} = 6.3138
    res = syn.paired_ratio_test([2.0, 4.0], [1.0, 1.0])
    hw = 6.313751514675 * (math.log(2) / math.sqrt(2)) / math.sqrt(2)
    assert res["lo"] == pytest.approx(math.exp(1.5 * math.log(2) - hw), rel=1e-9)
    assert res["hi"] == pytest.approx(math.exp(1.5 * math.log(2) + hw), rel=1e-9)
    assert not res["refuted"] and not res["shown"]
    # a clear loss on ten seeds is refuted, a clear win shown
    base = [1.0 + 0.01 * k for k in range(10)]
    assert syn.paired_ratio_test([2 * x * (1 + 0.02 * (k % 3)) for k, x in enumerate(base)], base)[
        "refuted"
    ]
    assert syn.paired_ratio_test(
        [0.5 * x * (1 + 0.02 * (k % 3)) for k, x in enumerate(base)], base
    )["shown"]
    with pytest.raises(ValueError, match="at least 2"):
        syn.paired_ratio_test([1.0], [1.0])


def test_equal_samples_test_picks_the_better_baseline():
    def runs(vals):
        return [{"gap": [1.0, v]} for v in vals]

    res = {
        "FSQ r=2": runs([1.0, 1.1, 0.9, 1.0]),
        "FSQ r=5": runs([3.0, 3.3, 2.7, 3.1]),
        "1-sample": runs([1.0, 1.05, 0.95, 1.0]),
        "SMD m=10": runs([2.0, 2.0, 2.0, 2.0]),
    }
    verdict, out = syn.equal_samples_test(res, 10)
    assert out["equal_samples_baseline"] == "1-sample"
    assert not out["equal_samples[FSQ r=2]_refuted"] and out["equal_samples[FSQ r=5]_refuted"]
    assert out["equal_samples[FSQ r=2]_verdict"] == "holds"  # upper bound 1.05 <= 1.1
    assert out["equal_samples[FSQ r=5]_verdict"] == "does not hold"
    assert verdict == "does not hold" and out["ok_equal_samples"] is False
    assert out["equal_samples[FSQ r=2]_point_rule"] and not out["equal_samples[FSQ r=5]_point_rule"]
    assert "vs_adaptive_smd_verdict" not in out  # no such run: no reading
    # not refuted, not shown: inconclusive, which is no longer a pass
    res["FSQ r=5"] = runs([1.2, 0.8, 1.1, 0.9])
    verdict, out = syn.equal_samples_test(res, 10)
    assert not out["equal_samples[FSQ r=5]_refuted"] and not out["equal_samples[FSQ r=5]_shown"]
    assert verdict == "inconclusive" and out["ok_equal_samples"] is False
    res["FSQ r=5"] = runs([0.5, 0.52, 0.49, 0.5])
    verdict, out = syn.equal_samples_test(res, 10)
    assert verdict == "holds" and out["ok_equal_samples"] is True
    # the reading against SMD with the adaptive step, when that run is there
    res["SMD m=10, adaptive q step"] = runs([0.5, 0.5, 0.5, 0.5])
    verdict, out = syn.equal_samples_test(res, 10)
    assert verdict == "holds"  # the reading does not enter the claim's verdict
    assert out["vs_adaptive_smd_baseline"] == "SMD m=10, adaptive q step"
    assert out["vs_adaptive_smd[FSQ r=2]_verdict"] == "does not hold"  # about 2x worse
    assert out["vs_adaptive_smd[FSQ r=5]_verdict"] == "holds"
    assert out["vs_adaptive_smd_verdict"] == "does not hold"


@pytest.mark.parametrize(
    ("tests", "want"),
    [
        ([(True, False), (False, False)], "does not hold"),
        ([(False, True), (False, True)], "holds"),
        ([(False, True), (False, False)], "inconclusive"),
    ],
)
def test_three_valued_verdict_and_its_combination(tests, want):
    verdicts = [verdicts_mod.verdict({"refuted": a, "shown": b}) for a, b in tests]
    assert verdicts_mod.combine(verdicts) == want
    # the experiment: any failed item fails it; an inconclusive claim leaves it inconclusive
    assert syn.overall_verdict(want, [True, True]) == want
    assert syn.overall_verdict(want, [True, False]) == "does not hold"


def test_bound_holds_rule():
    ok = {"gap": [0.5, 0.1], "bound": [0.6, 0.1]}
    bad = {"gap": [0.5, 0.2], "bound": [0.6, 0.1]}
    assert syn.bound_holds([ok], "bound")
    assert not syn.bound_holds([ok, bad], "bound")


def test_registered_as_an_experiment():
    # synthetic's quick run is over the main job's 90 s: it sits in the extra group
    eps = {ep.name: ep.value for ep in entry_points(group="frontier_opt.experiments.extra")}
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
