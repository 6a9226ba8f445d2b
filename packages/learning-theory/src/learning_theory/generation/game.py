r"""The generation game: adversaries, generators, and a run loop.

At step :math:`t = 1, 2, \dots` the adversary presents :math:`w_t \in K` (the unknown target
:math:`K = L_z` of a collection), the generator adds it to :math:`S_t = \{w_1, \dots, w_t\}` and
outputs :math:`o_t`. *Validity* asks :math:`o_t \in K`; *novelty* asks :math:`o_t \notin S_t`.

Generators:

- :class:`KMGenerator`, Kleinberg–Mullainathan (2024). Among :math:`L_0..L_{t-1}` call
  :math:`L_n` *consistent* if :math:`S_t \subseteq L_n` and *critical* if it is consistent and
  :math:`L_n \subseteq L_i` for every consistent :math:`i < n`. Output an unused element of the
  highest-index critical language. Once :math:`t \ge z + 1` and every :math:`L_i`, :math:`i < z`,
  with :math:`K \not\subseteq L_i` has been refuted by a presented string, :math:`K` is critical
  and every later critical language is a subset of it, so every output is valid
  (:func:`learning_theory.generation.metrics.km_validity_time` computes this time).
- :class:`ExploringGenerator`: KM, except that on the steps of a schedule it outputs an unused
  element of the *broadest* consistent language (the lowest-index one). With a schedule of
  vanishing frequency (perfect squares: :math:`\sqrt T` of :math:`T` steps) it makes infinitely
  many mistakes when the broad language is wrong, at frequency :math:`\to 0`, and it generates the
  whole broad language when it is right, e.g. when the adversary withholds part of :math:`K`.
  With a constant-rate schedule it trades a constant fraction of validity for that breadth.
- :class:`PartialNoveltyGenerator`: only a fraction :math:`\alpha` of its outputs must be novel;
  the others repeat the latest presented string (always valid).

"Unused" means not presented and not output before: generators sweep their language.

Example:
    >>> from learning_theory.generation.languages import arithmetic_collection
    >>> C = arithmetic_collection(4)
    >>> run = play(KMGenerator(C), Enumeration(C[1]), 6)   # target: the evens
    >>> run.outputs   # step 1 considers only L_0 = N and errs; from step 2 on: evens
    [1, 4, 6, 8, 10, 12]
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .languages import Collection, Language

__all__ = [
    "Adversary",
    "Enumeration",
    "ExploringGenerator",
    "Generator",
    "KMGenerator",
    "PartialNoveltyGenerator",
    "Run",
    "Stalling",
    "Withholding",
    "constant_rate",
    "perfect_squares",
    "play",
]


class _Cursor:
    """Smallest not-yet-used element of an enumeration (used sets only grow, so it is monotone)."""

    def __init__(self, it: Iterator[int]):
        self.it = it
        self.head: int | None = None

    def next_unused(self, used: Callable[[int], bool], limit: int | None = None) -> int | None:
        scanned = 0
        while True:
            if self.head is None:
                self.head = next(self.it, None)
                if self.head is None:
                    return None
            if not used(self.head):
                return self.head
            self.head = None
            scanned += 1
            if limit is not None and scanned >= limit:
                return None


# --------------------------------------------------------------------------- adversaries


class Adversary(ABC):
    """Presents one string of the target per step; may look at the generator (adaptive)."""

    target: Language

    @abstractmethod
    def next(self, t: int, generator: Generator) -> int:
        """The string presented at step ``t`` (1-based)."""


class Enumeration(Adversary):
    """Presents the target's enumeration in order (optionally skipping a withheld part).

    Raises:
        ValueError: the enumeration is empty, disagrees with the oracle on its first elements,
            or runs out during a game (targets must be infinite).
    """

    def __init__(
        self,
        target: Language,
        withhold: Callable[[int], bool] | None = None,
        max_skip: int = 100_000,
    ):
        target.validate()
        self.target = target
        self.withhold = withhold
        self.max_skip = max_skip
        self._it = target.elements()
        self._count = 0

    def next(self, t, generator):
        for skipped, x in enumerate(self._it):
            if self.withhold is None or not self.withhold(x):
                self._count += 1
                return x
            if skipped + 1 >= self.max_skip:
                raise ValueError(
                    f"{self.target.name}: {skipped + 1} consecutive strings withheld; the "
                    "presented part looks finite (withhold less of the target)"
                )
        raise ValueError(
            f"{self.target.name}: enumeration ended after {self._count} strings "
            "(the target must be infinite and not entirely withheld)"
        )


class Withholding(Enumeration):
    r"""Enumerates :math:`K \setminus W` only: the strings of ``withheld`` never appear.

    Example: target :math:`\mathbb N`, withheld odds; the presentation equals a full
    enumeration of the evens, so no generator can tell the two targets apart.
    """

    def __init__(self, target: Language, withheld: Language | Callable[[int], bool]):
        pred = withheld.__contains__ if isinstance(withheld, Language) else withheld
        super().__init__(target, withhold=pred)


class Stalling(Adversary):
    r"""Adaptive: delays refuting wrong languages for as long as its patience allows.

    On step :math:`t` with :math:`t \bmod P \ne 0` it looks at the next ``scan`` unpresented
    strings of :math:`K` and presents the one that leaves the most languages of the collection
    consistent with the sample (ties: one inside the language the generator is generating
    from, then the smallest). Every :math:`P`-th step it presents the smallest unpresented
    string of :math:`K`, so every string of :math:`K` still appears eventually (a full
    enumeration in the limit) while refutations can be postponed up to step :math:`P`.
    """

    def __init__(self, target: Language, collection: Collection, patience: int, scan: int = 64):
        if int(patience) < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        if int(scan) < 1:
            raise ValueError(f"scan must be >= 1, got {scan}")
        target.validate()
        self.target, self.collection, self.patience, self.scan = target, collection, patience, scan
        self.presented: set[int] = set()
        self.alive = list(range(len(collection)))  # languages consistent with the presented
        self._main = _Cursor(target.elements())

    def _candidates(self) -> list[int]:
        out: list[int] = []
        it = (x for x in self.target.elements() if x not in self.presented)
        for x in it:
            out.append(x)
            if len(out) >= self.scan:
                break
        return out

    def next(self, t, generator):
        if t % self.patience == 0:
            x = self._main.next_unused(self.presented.__contains__)
        else:
            h = generator.hypothesis
            lang_h = self.collection[h] if h is not None else None

            def score(x):
                kept = sum(x in self.collection[i] for i in self.alive)
                return (-kept, 0 if lang_h is not None and x in lang_h else 1, x)

            cands = self._candidates()
            x = min(cands, key=score) if cands else None
        if x is None:
            raise ValueError(f"{self.target.name}: enumeration ended (targets must be infinite)")
        self.presented.add(x)
        self.alive = [i for i in self.alive if x in self.collection[i]]
        return x


# --------------------------------------------------------------------------- generators


class Generator(ABC):
    """Observes one presented string per step and outputs one string."""

    hypothesis: int | None = None

    @abstractmethod
    def observe(self, w: int) -> None:
        """Add the presented string to the sample."""

    @abstractmethod
    def generate(self) -> int:
        """The output of the current step."""


class KMGenerator(Generator):
    r"""The Kleinberg–Mullainathan critical-language generator.

    Args:
        collection: the languages :math:`L_0, L_1, \dots`.
        window: for pairs without an exact subset test, test :math:`L_i \cap [0, W) \subseteq
            L_j` with :math:`W` = ``window(t)`` (KM's membership-query variant); ``None``
            requires exact tests.
        fresh: also avoid its own earlier outputs (sweep the language) rather than only
            presented strings.
    """

    def __init__(
        self,
        collection: Collection,
        window: Callable[[int], int] | None = None,
        fresh: bool = True,
    ):
        self.C = collection
        self.window = window
        self.fresh = fresh
        self.t = 0
        self.seen: set[int] = set()
        self.seen_list: list[int] = []
        self.outputs: set[int] = set()
        self.consistent: list[bool] = []
        self._cursors: dict[int, _Cursor] = {}
        self._fallback = _Cursor(itertools.count())
        self._cache_key = None
        self._critical: list[int] = []

    # -- state
    def observe(self, w: int) -> None:
        self.t += 1
        self.seen.add(w)
        self.seen_list.append(w)
        for i, ok in enumerate(self.consistent):
            if ok and w not in self.C[i]:
                self.consistent[i] = False
        while len(self.consistent) < min(self.t, len(self.C)):  # L_{t-1} enters at step t
            lang = self.C[len(self.consistent)]
            self.consistent.append(all(x in lang for x in self.seen_list))

    def _used(self, x: int) -> bool:
        return x in self.seen or (self.fresh and x in self.outputs)

    def critical(self) -> list[int]:
        """Indices of the critical languages at the current step, increasing."""
        win = self.window(self.t) if self.window is not None else None
        key = (tuple(self.consistent), win)
        if key != self._cache_key:
            cons = [i for i, ok in enumerate(self.consistent) if ok]
            self._critical = [
                n for k, n in enumerate(cons) if all(self.C.subset(n, i, win) for i in cons[:k])
            ]
            self._cache_key = key
        return self._critical

    @property
    def hypothesis(self) -> int | None:  # type: ignore[override]
        crit = self.critical()
        return crit[-1] if crit else None

    def broadest(self) -> int | None:
        """The lowest-index consistent language (the first critical one)."""
        crit = self.critical()
        return crit[0] if crit else None

    def emit_from(self, i: int | None) -> int:
        """An unused element of :math:`L_i` (any unused string if ``i`` is None)."""
        cur = (
            self._fallback
            if i is None
            else self._cursors.setdefault(i, _Cursor(self.C[i].elements()))
        )
        x = cur.next_unused(self._used)
        if x is None:  # a finite language ran out: fall back to any unused string
            x = self._fallback.next_unused(self._used)
        self.outputs.add(x)
        return x

    def generate(self) -> int:
        return self.emit_from(self.hypothesis)


def perfect_squares(t: int) -> bool:
    """Explore on steps 1, 4, 9, 16, ...: :math:`\\lfloor\\sqrt T\\rfloor` of the first T steps."""
    r = math.isqrt(t)
    return r * r == t


def constant_rate(rate: float) -> Callable[[int], bool]:
    r"""Explore where :math:`\lfloor \rho t \rfloor` increases (a fraction :math:`\rho`)."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must lie in [0, 1], got {rate}")
    return lambda t: math.floor(rate * t) > math.floor(rate * (t - 1))


class ExploringGenerator(KMGenerator):
    """KM, but on ``explore(t)`` steps an unused element of the broadest consistent language."""

    def __init__(self, collection: Collection, explore: Callable[[int], bool], **kw):
        super().__init__(collection, **kw)
        self.explore = explore

    def generate(self) -> int:
        if self.explore(self.t):
            return self.emit_from(self.broadest())
        return super().generate()


class PartialNoveltyGenerator(KMGenerator):
    r"""Only a fraction :math:`\alpha` of outputs need be novel: KM on the steps where
    :math:`\lfloor\alpha t\rfloor` increases, else repeat the latest presented string."""

    def __init__(self, collection: Collection, alpha: float, **kw):
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"novelty fraction alpha must lie in (0, 1], got {alpha}")
        super().__init__(collection, **kw)
        self.alpha = alpha

    def generate(self) -> int:
        t, a = self.t, self.alpha
        if math.floor(a * t) > math.floor(a * (t - 1)):
            return super().generate()
        return self.seen_list[-1]


# --------------------------------------------------------------------------- the run loop


@dataclass
class Run:
    """A finished game: presented strings, outputs, and the hypothesis at every step."""

    presented: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    hypotheses: list[int | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.outputs)


def play(generator: Generator, adversary: Adversary, steps: int) -> Run:
    """Play ``steps`` rounds: present, observe, generate."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    run = Run()
    for t in range(1, steps + 1):
        w = adversary.next(t, generator)
        generator.observe(w)
        o = generator.generate()
        run.presented.append(w)
        run.outputs.append(o)
        run.hypotheses.append(generator.hypothesis)
    return run
