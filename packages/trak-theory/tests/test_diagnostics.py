"""Diagnostics against independent computations (sklearn's AUC, explicit loops)."""

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score

from trak_theory.diagnostics import (
    bootstrap_aucs,
    kendall,
    lds,
    lds_per_target,
    mislabel_auc,
    paired_difference,
    per_target,
    separation_auc,
    spearman,
    topk_overlap,
)


def test_separation_auc_matches_sklearn():
    rng = np.random.default_rng(0)
    truth = rng.normal(size=97)
    est = truth + rng.normal(size=97)
    est[:5] = est[5]  # ties count 1/2
    top = np.zeros(97, bool)
    top[np.argsort(-truth)[:10]] = True
    assert separation_auc(est, truth, q=10 / 97) == pytest.approx(roc_auc_score(top, est))
    assert mislabel_auc(est, top) == pytest.approx(roc_auc_score(top, est))


def test_rank_correlations_and_overlap():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=31), rng.normal(size=31)
    assert spearman(a, b) == pytest.approx(np.corrcoef(stats.rankdata(a), stats.rankdata(b))[0, 1])
    conc = sum(np.sign((a[i] - a[j]) * (b[i] - b[j])) for i in range(31) for j in range(i))
    assert kendall(a, b) == pytest.approx(conc / (31 * 30 / 2))
    assert topk_overlap(a, a, 7) == 1.0
    assert topk_overlap(a, -a, 7) == 0.0
    assert np.isnan(spearman(np.ones(4), a[:4]))
    with pytest.raises(ValueError, match="shapes"):
        per_target(spearman, np.ones((2, 3)), np.ones((3, 2)))


def test_lds_by_hand():
    rng = np.random.default_rng(2)
    scores = rng.normal(size=(3, 20))
    masks = (rng.random((15, 20)) < 0.5).astype(float)
    outputs = masks @ scores.T + 0.5 * rng.normal(size=(15, 3))
    want = np.mean([stats.spearmanr(masks @ scores[t], outputs[:, t]).statistic for t in range(3)])
    assert lds(scores, masks, outputs) == pytest.approx(want)
    assert lds(scores, masks, masks @ scores.T) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="shapes"):
        lds(scores, masks[:, :5], outputs)


def test_bad_arguments():
    with pytest.raises(ValueError, match="q must"):
        separation_auc([1, 2], [1, 2], q=1.5)
    with pytest.raises(ValueError, match="k must"):
        topk_overlap([1, 2], [1, 2], 3)
    with pytest.raises(ValueError, match="empty"):
        spearman([], [])
    with pytest.raises(ValueError, match="positives and negatives"):
        mislabel_auc([0.1, 0.2], [False, False])


def test_lds_per_target_averages_to_lds_and_paired_difference_by_hand():
    rng = np.random.default_rng(3)
    scores, masks = rng.normal(size=(7, 13)), (rng.uniform(size=(11, 13)) < 0.5).astype(float)
    outputs = masks @ scores.T + 0.3 * rng.normal(size=(11, 7))
    per = lds_per_target(scores, masks, outputs)
    assert per.shape == (7,) and lds(scores, masks, outputs) == pytest.approx(np.nanmean(per))
    for t in range(7):
        assert per[t] == pytest.approx(spearman(masks @ scores[t], outputs[:, t]))
    # d = (1, 3, nan, 5) - (0, 0, 0, 0): mean 3 over the finite entries, SE = 2 / sqrt(3)
    mean, se = paired_difference([1.0, 3.0, np.nan, 5.0], [0.0, 0.0, 0.0, 0.0])
    assert mean == pytest.approx(3.0) and se == pytest.approx(2.0 / np.sqrt(3.0))
    with pytest.raises(ValueError, match="at least 2"):
        paired_difference([1.0], [0.0])


def test_bootstrap_auc_se_matches_monte_carlo():
    # the bootstrap SE of one data set vs the spread of the AUC over fresh data sets
    rng = np.random.default_rng(3)
    n, n_pos = 173, 29
    lab = np.zeros(n, bool)
    lab[:n_pos] = True

    def draw():
        a = rng.normal(size=n) + lab * 1.0
        b = 0.7 * a + 0.7 * rng.normal(size=n)  # a second, correlated scoring
        return a, b

    mc = np.array([[mislabel_auc(s, lab) for s in draw()] for _ in range(400)])
    mc_diff_sd = (mc[:, 0] - mc[:, 1]).std(ddof=1)
    ses, diff_ses = [], []
    for i in range(6):
        a, b = draw()
        boot = bootstrap_aucs([a, b], lab, n_boot=400, seed=i)
        assert boot.shape == (400, 2)
        ses.append(boot[:, 0].std(ddof=1))
        diff_ses.append((boot[:, 0] - boot[:, 1]).std(ddof=1))
    assert np.mean(ses) == pytest.approx(mc[:, 0].std(ddof=1), rel=0.2)
    assert np.mean(diff_ses) == pytest.approx(mc_diff_sd, rel=0.25)


def test_bootstrap_auc_bad_input():
    with pytest.raises(ValueError, match="length 4"):
        bootstrap_aucs([np.ones(3)], np.array([True, False, True, False]))
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap_aucs([np.arange(4.0)], np.array([True, False, True, False]), n_boot=1)


def test_paired_metrics_refuse_mismatched_or_non_finite_inputs():
    for fn in (spearman, kendall, separation_auc):
        with pytest.raises(ValueError, match="pair up"):
            fn([0.1, 0.2, 0.3], [1.0, 2.0])
        with pytest.raises(ValueError, match="finite"):
            fn([0.1, float("nan"), 0.3], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="pair up"):
        topk_overlap([3, 2, 1, 0], [3, 1, 2], 2)
