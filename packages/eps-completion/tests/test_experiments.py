"""Pieces of the experiments that decide verdicts."""

import json
import math
import sys

import pytest
import torch

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


def test_real_fails_fast_naming_the_data_extra_without_scikit_learn(monkeypatch, tmp_path):
    from eps_completion.experiments import real

    monkeypatch.setitem(sys.modules, "sklearn", None)  # `import sklearn...` now raises
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match=r"eps-completion\[data\]"):
        real.load_digits_matrix()
    with pytest.raises(ImportError, match=r"eps-completion\[data\]"):
        real.main(["--quick", "--out", str(tmp_path)])


def test_real_methods_recover_an_exact_low_rank_matrix():
    """Rank RANK - 1 plus a column offset: after centring by the observed column means it has
    rank <= RANK, so on a generous mask every rank-RANK method's test RMSE is ~0 (up to its
    own bias) and column-mean's is not."""
    from eps_completion import low_rank_matrix
    from eps_completion.experiments.real import RANK, test_rmse

    g = torch.Generator().manual_seed(3)
    mat = low_rank_matrix(37, 23, RANK - 1, g) + torch.linspace(0, 2, 23, dtype=torch.float64)
    out = test_rmse(mat, 0.7, 1, 3000, 300, g)
    rms = float(mat.pow(2).mean().sqrt())
    # the surrogate keeps its O(eps^2) bias (eps = 0.1: ~1e-2 relative, README); soft-impute
    # its shrinkage (lambda = 1e-4 sigma_1 over ~10 iterations per step of its path)
    assert out["eps"][0] < 0.1 * rms
    for name in ("bm", "als", "svp"):
        assert out[name][0] < 1e-4 * rms, name
    assert out["soft-impute"][0] < 1e-2 * rms
    assert out["column-mean"][0] > 0.3 * rms


def test_real_verdict_follows_the_rule():
    from eps_completion.experiments.real import SLACK, verdict

    base = {"bm": 1.0, "als": 2.0, "soft-impute": 3.0, "svp": 4.0, "column-mean": 5.0}
    assert verdict([{**base, "eps": 1 + SLACK}]) == (True, [1 + SLACK])
    assert not verdict([{**base, "eps": 1 + 2 * SLACK}])[0]
    assert not verdict([{**base, "column-mean": 0.5, "eps": 0.9}])[0]
    assert not verdict([{**base, "eps": 0.9}, {**base, "eps": 1.2}])[0]


@pytest.mark.slow  # ~10 s CPU, mostly importing scikit-learn and matplotlib; 100 s at load 10
def test_real_quick_path_runs_end_to_end_on_a_tiny_size(monkeypatch, tmp_path):
    pytest.importorskip("sklearn")
    from eps_completion.experiments import real

    mat = real.load_digits_matrix()  # the bundled data (scikit-learn's import is the cost)
    assert mat.shape == (1797, 64) and mat.dtype == torch.float64
    assert float(mat.min()) == 0.0 and float(mat.max()) == 1.0
    monkeypatch.setitem(real.SIZES, "quick", (40, (0.6,), 1, 50, 20))
    assert real.main(["--quick", "--out", str(tmp_path)]) in (0, None)
    res = json.loads(next(tmp_path.rglob("result.json")).read_text())
    assert res["paper"] == "P05" and isinstance(res["holds"], bool)
    assert len(res["metrics"]["eps_over_best_baseline"]) == 1


@pytest.mark.parametrize(
    ("eps", "bm", "als", "holds"),
    [
        ([0.5, 0.9], [0.2, 0.9], [0.1, 0.85], True),  # +0.3 at one point, never worse
        ([0.5, 0.75], [0.2, 0.9], [0.1, 0.85], False),  # 0.15 worse than bm at point 2
        ([0.5, 0.81], [0.2, 0.9], [0.1, 0.85], True),  # 0.09 worse: inside the slack
        ([0.35, 0.9], [0.2, 0.9], [0.1, 0.85], False),  # best gain 0.15 < margin
        ([0.0, 0.0], [0.0, 0.0], [0.0, 0.0], False),  # nobody succeeds: nothing rescued
    ],
)
def test_hard_regimes_verdict_follows_the_rule(eps, bm, als, holds):
    from eps_completion.experiments.hard_regimes import MARGIN, SLACK, verdict

    assert (SLACK, MARGIN) == (0.1, 0.2)  # the cases above sit on either side of these
    got, never_worse, gain = verdict({"eps": eps, "bm": bm, "als": als})
    assert got is holds
    triples = list(zip(eps, bm, als, strict=True))
    assert never_worse is all(e >= max(b, a) - SLACK for e, b, a in triples)
    assert gain == max(e - max(b, a) for e, b, a in triples)


def test_hard_regimes_sizes_keep_the_issue_minimum_of_20_instances_per_point():
    from eps_completion.experiments.hard_regimes import SIZES

    for mode, (n, r, n_inst, _, points, _) in SIZES.items():
        assert n_inst >= 20, mode
        for rho, _ in points:  # at least the degrees of freedom, fewer than every entry
            assert rho >= 1.0, mode
            assert rho * r * (2 * n - r) < n * n, mode


def test_hard_regimes_full_flag_selects_the_full_size_end_to_end(monkeypatch, tmp_path):
    pytest.importorskip("cvxpy")
    from eps_completion.experiments import hard_regimes

    # a tiny stand-in for the full size: 2 points, 2 instances, with the k = 2r pipeline
    tiny = (10, 1, 2, 30, [(2.0, False), (3.0, True)], True)
    monkeypatch.setitem(hard_regimes.SIZES, "full", tiny)
    assert hard_regimes.main(["--full", "--out", str(tmp_path)]) in (0, None)
    res = json.loads(next(tmp_path.rglob("result.json")).read_text())
    metrics = res["metrics"]
    assert set(metrics) >= {"success[eps]", "success[eps-k2r]", "success[nuclear]"}
    for key in (k for k in metrics if k.startswith("success[")):
        assert len(metrics[key]) == 2 and all(v in (0.0, 0.5, 1.0) for v in metrics[key])
    holds, _, gain = hard_regimes.verdict(
        {m: metrics[f"success[{m}]"] for m in ("eps", "bm", "als")}
    )
    assert res["holds"] is holds and metrics["max_gain_over_bm_als"] == gain
