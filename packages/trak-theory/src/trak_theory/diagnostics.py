r"""How well estimated attributions track the truth: rank correlations, separation, the LDS.

The paper's point: even when :math:`|\hat\tau - \tau|` is large, the *ordering* that matters
for separating highly influential from weakly influential points can survive. So besides
Spearman's :math:`\rho` and Kendall's :math:`\tau_b`, we measure

- top-k overlap :math:`|\mathrm{top}_k(\hat\tau) \cap \mathrm{top}_k(\tau)|/k`;
- separation AUC: the probability that a point in the true top-q fraction gets a higher
  estimated score than a point outside it (Mann--Whitney statistic, ties count 1/2);
- the linear datamodeling score: for random subsets :math:`S_j` and target t, the Spearman
  correlation over j between :math:`\sum_{i\in S_j}\hat\tau_{ti}` and the target output of
  the model retrained on :math:`S_j`, averaged over targets.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

__all__ = [
    "bootstrap_aucs",
    "kendall",
    "lds",
    "lds_per_target",
    "mislabel_auc",
    "paired_difference",
    "per_target",
    "separation_auc",
    "spearman",
    "topk_overlap",
]


def _vec(a) -> np.ndarray:
    v = np.asarray(a, dtype=np.float64).reshape(-1)
    if v.size == 0:
        raise ValueError("empty score vector")
    return v


def _pair(est, truth) -> tuple[np.ndarray, np.ndarray]:
    a, b = _vec(est), _vec(truth)
    if a.size != b.size:
        raise ValueError(f"est has {a.size} scores but truth {b.size}: they must pair up")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("scores must be finite (found NaN or inf)")
    return a, b


def spearman(est, truth) -> float:
    """Spearman rank correlation (NaN when either side is constant)."""
    a, b = _pair(est, truth)
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(stats.spearmanr(a, b).statistic)


def kendall(est, truth) -> float:
    """Kendall's tau-b."""
    a, b = _pair(est, truth)
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(stats.kendalltau(a, b).statistic)


def topk_overlap(est, truth, k: int) -> float:
    """Fraction of the true top-k (largest) found in the estimated top-k.

    Example:
        >>> topk_overlap([3, 2, 1, 0], [3, 1, 2, 0], 2)
        0.5
    """
    a, b = _pair(est, truth)
    if not 1 <= k <= a.size:
        raise ValueError(f"k must be in [1, {a.size}], got {k}")
    return len(set(np.argsort(-a, kind="stable")[:k]) & set(np.argsort(-b, kind="stable")[:k])) / k


def _auc(scores: np.ndarray, positive: np.ndarray) -> float:
    pos, neg = positive.sum(), (~positive).sum()
    if pos == 0 or neg == 0:
        raise ValueError("AUC needs both positives and negatives")
    ranks = stats.rankdata(scores)  # average ranks: ties count 1/2
    return float((ranks[positive].sum() - pos * (pos + 1) / 2) / (pos * neg))


def separation_auc(est, truth, q: float = 0.1) -> float:
    """AUC of ``est`` for separating the top-q fraction of ``truth`` from the rest.

    Example:
        >>> separation_auc([0.9, 0.1, 0.5, 0.4], [5, 0, 1, 2], q=0.25)
        1.0
    """
    a, b = _pair(est, truth)
    if not 0 < q < 1:
        raise ValueError(f"q must be in (0, 1), got {q}")
    top = max(1, round(q * b.size))
    positive = np.zeros(b.size, bool)
    positive[np.argsort(-b, kind="stable")[:top]] = True
    return _auc(a, positive)


def mislabel_auc(self_scores, is_mislabelled) -> float:
    """AUC of ranking points by (low) self-influence-style score for finding flipped labels.

    ``self_scores`` should be high for suspicious points (for TRAK: the negated mean influence
    of a point on the held-out targets, or its self-influence).
    """
    lab = np.asarray(is_mislabelled, bool).reshape(-1)
    return _auc(_vec(self_scores), lab)


def bootstrap_aucs(score_sets, positive, n_boot: int = 500, seed: int = 0) -> np.ndarray:
    r"""AUCs of several scorings on the same bootstrap resamples of the points, (n_boot, M).

    Each resample draws the n points with replacement (rejecting draws without both classes);
    every scoring is evaluated on the *same* draw, so the spread of a column is the standard
    error of that AUC and the spread of a difference of columns is the standard error of the
    paired difference (the scorings are correlated through the shared points).

    Args:
        score_sets: M score vectors of length n (high = more likely positive).
        positive: (n,) boolean labels.
        n_boot: number of resamples.
        seed: resampling seed.
    """
    lab = np.asarray(positive, bool).reshape(-1)
    sets = [_vec(s) for s in score_sets]
    if not sets or any(s.size != lab.size for s in sets):
        raise ValueError(f"need score vectors of length {lab.size}")
    if n_boot < 2:
        raise ValueError(f"n_boot must be >= 2, got {n_boot}")
    rng = np.random.default_rng(seed)
    out = np.empty((n_boot, len(sets)))
    b = 0
    while b < n_boot:
        idx = rng.integers(0, lab.size, lab.size)
        pos = lab[idx]
        if pos.all() or not pos.any():
            continue
        out[b] = [_auc(s[idx], pos) for s in sets]
        b += 1
    return out


def per_target(fn, est, truth, **kw) -> np.ndarray:
    """Apply ``fn(est[t], truth[t], **kw)`` to each target row of (m, n) matrices."""
    e, t = np.asarray(est, np.float64), np.asarray(truth, np.float64)
    if e.shape != t.shape:
        raise ValueError(f"shapes differ: {e.shape} vs {t.shape}")
    return np.array([fn(e[i], t[i], **kw) for i in range(e.shape[0])])


def lds_per_target(scores, masks, outputs) -> np.ndarray:
    r"""Each target's linear datamodeling correlation (the terms :func:`lds` averages).

    Args:
        scores: (m, n) attributions of train points (columns) to targets (rows).
        masks: (S, n) 0/1 subset indicators.
        outputs: (S, m) target outputs of the models retrained on each subset.

    Returns:
        (m,) Spearman(masks @ scores[t], outputs[:, t]) per target (NaN where constant).
    """
    s, msk, out = (np.asarray(a, np.float64) for a in (scores, masks, outputs))
    if msk.shape[1] != s.shape[1] or out.shape != (msk.shape[0], s.shape[0]):
        raise ValueError(
            f"shapes: scores {s.shape}, masks {msk.shape}, outputs {out.shape} do not agree"
        )
    pred = msk @ s.T  # (S, m)
    return np.array([spearman(pred[:, t], out[:, t]) for t in range(s.shape[0])])


def lds(scores, masks, outputs) -> float:
    r"""Linear datamodeling score: the mean over targets of :func:`lds_per_target`.

    Args:
        scores: (m, n) attributions of train points (columns) to targets (rows).
        masks: (S, n) 0/1 subset indicators.
        outputs: (S, m) target outputs of the models retrained on each subset.

    Returns:
        Mean over targets of Spearman(masks @ scores[t], outputs[:, t]).
    """
    return float(np.nanmean(lds_per_target(scores, masks, outputs)))


def paired_difference(a, b) -> tuple[float, float]:
    """Mean and standard error of ``a - b`` over the entries where both are finite.

    Two attribution methods scored on the same targets and retrains: their LDS difference is
    judged against this standard error (the noise of a finite set of targets and retrains).
    """
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    d = d[np.isfinite(d)]
    if d.size < 2:
        raise ValueError(f"need at least 2 finite paired values, got {d.size}")
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(d.size))
