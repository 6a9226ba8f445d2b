r"""Metrics over a run of the generation game, and KM's validity time.

For a run of :math:`T` steps with outputs :math:`o_1..o_T`, presented :math:`w_1..w_T` and
target :math:`K`:

- invalid frequency :math:`\frac1T |\{t : o_t \notin K\}|`; precision is one minus it (the paper's
  notion: precision 1 means mistakes of vanishing frequency, not no mistakes);
- recall at scale :math:`W`: :math:`|\{o_t\} \cap K \cap [0, W)| / |K \cap [0, W)|`, the share of
  the target's first strings that the generator has produced (a finite-horizon proxy for the
  density of the generated set in :math:`K`); the *unseen* recall replaces :math:`K` by
  :math:`K \setminus S_T` (what the adversary has not shown);
- novelty fraction :math:`\frac1T |\{t : o_t \notin \{w_1..w_t\}\}|`;
- time to validity: the first :math:`t_0` with :math:`o_t \in K` for all :math:`t_0 \le t \le T`
  (:math:`T + 1` if the last output is invalid).

Example:
    >>> from learning_theory.generation.languages import ArithmeticProgression
    >>> from learning_theory.generation.game import Run
    >>> K = ArithmeticProgression(0, 2)
    >>> run = Run(presented=[0, 2, 4, 6], outputs=[1, 8, 3, 10])
    >>> invalid_frequency(run, K), time_to_validity(run, K), round(recall(run, K, 12), 3)
    (0.5, 4, 0.333)
"""

from __future__ import annotations

import numpy as np

from .game import Run
from .languages import Collection, Language

__all__ = [
    "invalid_frequency",
    "km_validity_time",
    "mistakes",
    "novelty_fraction",
    "precision",
    "precision_curve",
    "recall",
    "recall_curve",
    "time_to_validity",
]


def _nonempty(run: Run) -> None:
    if len(run.outputs) == 0:
        raise ValueError("the run has no outputs")


def _valid(run: Run, target: Language) -> np.ndarray:
    return np.array([o in target for o in run.outputs], dtype=bool)


def mistakes(run: Run, target: Language) -> int:
    """Number of invalid outputs."""
    return int((~_valid(run, target)).sum())


def invalid_frequency(run: Run, target: Language) -> float:
    """Fraction of outputs outside the target."""
    _nonempty(run)
    return float((~_valid(run, target)).mean())


def precision(run: Run, target: Language) -> float:
    """One minus the invalid frequency."""
    return 1.0 - invalid_frequency(run, target)


def precision_curve(run: Run, target: Language) -> np.ndarray:
    """Running precision after each step: entry t-1 is the precision of the first t outputs."""
    _nonempty(run)
    v = _valid(run, target)
    return np.cumsum(v) / np.arange(1, len(v) + 1)


def _recall_base(run: Run, target: Language, window: int, unseen_only: bool) -> set[int]:
    k = target.prefix(window)
    if unseen_only:
        k -= set(run.presented)
    if not k:
        what = "unpresented string" if unseen_only else "string"
        raise ValueError(f"{target.name} has no {what} below {window}: recall undefined")
    return k


def _novel_outputs(run: Run) -> set[int]:
    seen: set[int] = set()
    out = set()
    for w, o in zip(run.presented, run.outputs, strict=True):
        seen.add(w)
        if o not in seen:
            out.add(o)
    return out


def recall(
    run: Run, target: Language, window: int, unseen_only: bool = False, novel_only: bool = False
) -> float:
    r"""Share of :math:`K \cap [0, W)` among the outputs.

    With ``unseen_only`` the share of :math:`(K \setminus S_T) \cap [0, W)`: how much of what
    the adversary never presented the generator produced (the withheld part, for a
    withholding adversary). With ``novel_only`` only outputs that were novel when made count
    (repeats of presented strings earn nothing).
    """
    k = _recall_base(run, target, window, unseen_only)
    outs = _novel_outputs(run) if novel_only else set(run.outputs)
    return len(k & outs) / len(k)


def recall_curve(
    run: Run, target: Language, window: int, points: list[int], unseen_only: bool = False
) -> list[float]:
    """:func:`recall` of the first t outputs for each t in ``points`` (the base set fixed at T)."""
    k = _recall_base(run, target, window, unseen_only)
    out, got, last = [], set(), 0
    for t in points:
        got.update(o for o in run.outputs[last:t] if o in k)
        last = t
        out.append(len(got) / len(k))
    return out


def novelty_fraction(run: Run) -> float:
    """Fraction of steps whose output was not presented at or before that step."""
    _nonempty(run)
    seen: set[int] = set()
    novel = 0
    for w, o in zip(run.presented, run.outputs, strict=True):
        seen.add(w)
        novel += o not in seen
    return novel / len(run.outputs)


def time_to_validity(run: Run, target: Language) -> int:
    """First step from which every output of the run is valid (``T + 1`` if the last is not)."""
    _nonempty(run)
    bad = np.flatnonzero(~_valid(run, target))
    return 1 if bad.size == 0 else int(bad[-1]) + 2


def km_validity_time(collection: Collection, target_index: int, presented: list[int]) -> int | None:
    r"""The step after which KM's outputs are guaranteed valid, for this presentation.

    :math:`t^+ = \max(z + 1, \max_{i < z,\ K \not\subseteq L_i} s_i)` with :math:`z` the target's
    index and :math:`s_i` the first step presenting a string of :math:`K \setminus L_i` (KM's
    proof; needs exact subset tests). Returns ``None`` if some such :math:`L_i` is never refuted
    within ``presented``.
    """
    z = target_index
    if not 0 <= z < len(collection):
        raise ValueError(f"target index {z} outside the collection of {len(collection)}")
    K = collection[z]
    bad = [x for x in presented if x not in K]
    if bad:
        raise ValueError(f"presented string {bad[0]} is not in the target {K.name}")
    t_plus = z + 1
    for i in range(z):
        if collection.subset(z, i):
            continue
        s = next((t for t, w in enumerate(presented, 1) if w not in collection[i]), None)
        if s is None:
            return None
        t_plus = max(t_plus, s)
    return t_plus
