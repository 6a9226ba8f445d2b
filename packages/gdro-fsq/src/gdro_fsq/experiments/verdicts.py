r"""The experiments' rules: paired ratio tests with a three-valued verdict, and the bound check.

A claim "A is as good as B" is a non-inferiority claim with a margin: the geometric-mean gap
ratio :math:`e^{\mathbb E d}`, :math:`d_s = \log(\mathrm{gap}_{A,s}/\mathrm{gap}_{B,s})` over
paired seeds, is at most :data:`MARGIN` = 1.1. With the one-sided :math:`1-\alpha` t-bounds
``lo`` and ``hi`` of that ratio (:data:`LEVEL` :math:`\alpha = 0.05`):

* **holds** when ``hi <= 1.1`` (the data show the ratio is within the margin);
* **does not hold** when ``lo > 1.1`` (the data show it is outside);
* **inconclusive** otherwise (the interval straddles the margin: too few seeds to tell).

Before issue #20 the experiments counted "not refuted" as a pass and printed "refuted False,
shown False"; an inconclusive reading is no longer a pass.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "HOLDS",
    "INCONCLUSIVE",
    "LEVEL",
    "MARGIN",
    "NOT_HOLDS",
    "RULE",
    "bound_holds",
    "combine",
    "describe",
    "paired_ratio_test",
    "paired_reading",
    "verdict",
]

#: the non-inferiority margin on the geometric-mean gap ratio.
MARGIN = 1.1
#: the one-sided level of each t-bound.
LEVEL = 0.05
HOLDS, NOT_HOLDS, INCONCLUSIVE = "holds", "does not hold", "inconclusive"
#: the rule in words, printed beside every verdict.
RULE = (
    f"paired t-test on per-seed log gap ratios, margin {MARGIN}: holds if the one-sided "
    f"{1 - LEVEL:.0%} upper bound of the ratio is <= {MARGIN}, does not hold if the lower "
    f"bound is > {MARGIN}, inconclusive otherwise"
)


def paired_ratio_test(
    gaps: list[float], base: list[float], margin: float = MARGIN, level: float = LEVEL
) -> dict[str, Any]:
    r"""The paired test: ``d_s = log(gaps[s] / base[s])``.

    ``refuted`` when the one-sided t-test rejects :math:`\mathbb E d \le \log(\text{margin})`
    at ``level`` (:math:`\bar d - t_{1-\text{level},n-1}s_d/\sqrt n > \log\text{margin}`),
    ``shown`` when the one-sided upper bound :math:`\bar d + t_{1-\text{level},n-1}s_d/\sqrt n`
    is at most :math:`\log\text{margin}`; ``verdict`` is :func:`verdict` of the two. Also the
    geometric-mean ratio ``ratio``, its one-sided bounds ``lo`` and ``hi`` (together a
    two-sided :math:`1 - 2\,\text{level}` interval), the ``margin`` and the number of seeds
    ``n``. Gaps are floored at ``1e-12`` (the exact optimum is computed to about that accuracy).
    """
    from scipy.stats import t as student

    if len(gaps) != len(base) or len(gaps) < 2:
        raise ValueError(f"need two equal lists of at least 2 gaps, got {len(gaps)}, {len(base)}")
    d = [math.log(max(a, 1e-12) / max(b, 1e-12)) for a, b in zip(gaps, base, strict=True)]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half_width = float(student.ppf(1 - level, n - 1)) * sd / math.sqrt(n)
    out: dict[str, Any] = {
        "n": n,
        "ratio": math.exp(mean),
        "lo": math.exp(mean - half_width),
        "hi": math.exp(mean + half_width),
        "margin": margin,
        "refuted": mean - half_width > math.log(margin),
        "shown": mean + half_width <= math.log(margin),
    }
    out["verdict"] = verdict(out)
    return out


def verdict(test: dict[str, Any]) -> str:
    """:data:`HOLDS` when ``shown``, :data:`NOT_HOLDS` when ``refuted``, else
    :data:`INCONCLUSIVE` (the two cannot both be true: ``lo < hi``)."""
    if test["refuted"]:
        return NOT_HOLDS
    return HOLDS if test["shown"] else INCONCLUSIVE


def combine(verdicts: list[str]) -> str:
    """A claim made for several cases: it does not hold if one case does not, holds if every
    case does, and is inconclusive otherwise."""
    if NOT_HOLDS in verdicts:
        return NOT_HOLDS
    return HOLDS if all(v == HOLDS for v in verdicts) else INCONCLUSIVE


def paired_reading(
    finals: dict[str, list[float]], names: list[str], base: str, prefix: str
) -> tuple[str, dict[str, Any]]:
    """:func:`paired_ratio_test` of each of ``names`` against ``base`` on their common seeds
    (``finals``: the per-seed final gaps); ``(combined verdict, metrics)``, the metrics named
    ``{prefix}[{name}]_{field}`` plus ``{prefix}_verdict`` and ``{prefix}_baseline``."""
    out: dict[str, Any] = {f"{prefix}_baseline": base}
    verdicts = []
    for n in names:
        k = min(len(finals[n]), len(finals[base]))
        test = paired_ratio_test(finals[n][:k], finals[base][:k])
        verdicts.append(test["verdict"])
        for key, v in test.items():
            out[f"{prefix}[{n}]_{key}"] = v
    out[f"{prefix}_verdict"] = combine(verdicts)
    return out[f"{prefix}_verdict"], out


def describe(metrics: dict[str, Any], prefix: str, names: list[str]) -> str:
    """One line per reading: each size's ratio, its 90% interval, seeds and verdict."""
    return "; ".join(
        f"{n}: ratio {metrics[f'{prefix}[{n}]_ratio']:.3f} (one-sided 95% bounds "
        f"{metrics[f'{prefix}[{n}]_lo']:.3f} to {metrics[f'{prefix}[{n}]_hi']:.3f}, "
        f"{metrics[f'{prefix}[{n}]_n']} seeds): {metrics[f'{prefix}[{n}]_verdict']}"
        for n in names
    )


def bound_holds(runs: list[dict[str, list[float]]], key: str) -> bool:
    """Whether ``gap <= runs[key]`` at every recorded checkpoint of every run (a run must have
    recorded the bound at each checkpoint)."""
    return all(
        len(r[key]) == len(r["gap"]) and all(g <= b for g, b in zip(r["gap"], r[key], strict=True))
        for r in runs
    )
