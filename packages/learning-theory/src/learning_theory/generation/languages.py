r"""Countable collections of infinite languages over the universe :math:`\mathbb N = \{0, 1, ...\}`.

Strings are encoded as non-negative integers (binary strings by the shortlex bijection
:func:`int_to_string`), so one interface covers integer sets and regular languages. A
:class:`Language` has a membership oracle, an enumeration, and (when decidable here) an exact
subset test, which the critical-language generator needs.

Example:
    >>> evens = ArithmeticProgression(0, 2); mult4 = ArithmeticProgression(0, 4)
    >>> mult4.subset_of(evens), evens.subset_of(mult4)
    (True, False)
    >>> list(itertools.islice(evens.elements(), 4))
    [0, 2, 4, 6]
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence

__all__ = [
    "ArithmeticProgression",
    "Collection",
    "DFALanguage",
    "FiniteVariation",
    "Language",
    "arithmetic_collection",
    "dfa_collection",
    "int_to_string",
    "string_to_int",
]


class Language:
    r"""An infinite set of non-negative integers: membership oracle + enumeration.

    Args:
        name: a label.
        contains: the membership oracle :math:`x \mapsto [x \in L]`.
        enumerate: a function returning a fresh iterator over :math:`L` (each element once);
            default: scan :math:`0, 1, 2, \dots` through the oracle (increasing).
        periodic: ``(offset, period)`` if :math:`L` is eventually periodic from ``offset`` with
            ``period`` (then subset tests against other eventually periodic sets are exact).
    """

    def __init__(
        self,
        name: str,
        contains: Callable[[int], bool],
        enumerate: Callable[[], Iterator[int]] | None = None,
        periodic: tuple[int, int] | None = None,
    ):
        self.name = name
        self._contains = contains
        self._enumerate = enumerate
        self.periodic = periodic

    def __contains__(self, x: int) -> bool:
        return bool(self._contains(int(x)))

    def __repr__(self) -> str:
        return f"Language({self.name})"

    def elements(self) -> Iterator[int]:
        """A fresh iterator over the language (in its enumeration order)."""
        if self._enumerate is not None:
            return iter(self._enumerate())
        return (x for x in itertools.count() if self._contains(x))

    def validate(self, n: int = 32) -> None:
        """Check the first ``n`` enumerated elements: some exist, distinct, accepted by the oracle.

        Raises:
            ValueError: the enumeration is empty, repeats an element, or yields an element the
                membership oracle rejects.
        """
        seen: set[int] = set()
        for x in itertools.islice(self.elements(), n):
            if x in seen:
                raise ValueError(f"{self.name}: enumeration repeats element {x}")
            if x not in self:
                raise ValueError(
                    f"{self.name}: enumeration yields {x} but the membership oracle rejects it "
                    "(oracle and enumeration disagree)"
                )
            seen.add(x)
        if not seen:
            raise ValueError(f"{self.name}: empty enumeration (languages must be infinite)")

    def subset_of(self, other: Language) -> bool | None:
        r"""Exact :math:`L \subseteq L'` where decidable here, else ``None``.

        Two eventually periodic sets (offsets :math:`o, o'`, periods :math:`p, p'`) are
        compared on :math:`[0, \max(o, o') + \mathrm{lcm}(p, p'))`: beyond ``max(o, o')`` both
        membership patterns repeat with period lcm(p, p').
        """
        if self.periodic and other.periodic:
            (o1, p1), (o2, p2) = self.periodic, other.periodic
            horizon = max(o1, o2) + math.lcm(p1, p2)
            return all(x in other for x in range(horizon) if x in self)
        return None

    def prefix(self, n: int) -> set[int]:
        """:math:`L \\cap [0, n)` via the oracle."""
        return {x for x in range(n) if x in self}


class ArithmeticProgression(Language):
    r""":math:`\{a + d j : j \ge 0\}` with :math:`a \ge 0`, :math:`d \ge 1`."""

    def __init__(self, a: int, d: int):
        if int(d) < 1 or int(a) < 0:
            raise ValueError(f"arithmetic progression needs a >= 0 and d >= 1, got a={a}, d={d}")
        self.a, self.d = int(a), int(d)
        super().__init__(
            f"AP({self.a},{self.d})",
            lambda x: x >= self.a and (x - self.a) % self.d == 0,
            lambda: itertools.count(self.a, self.d),
            periodic=(self.a, self.d),
        )


class FiniteVariation(Language):
    r""":math:`(L \cup A) \setminus R` for finite :math:`A, R`: same tail, edited head.

    The base's enumeration must be increasing (true for the sets built here).
    """

    def __init__(self, base: Language, add: Iterable[int] = (), remove: Iterable[int] = ()):
        add, remove = frozenset(int(x) for x in add), frozenset(int(x) for x in remove)
        if add & remove:
            raise ValueError(f"elements both added and removed: {sorted(add & remove)}")
        self.base, self.add, self.remove = base, add, remove
        periodic = None
        if base.periodic:
            off = max([base.periodic[0], *[x + 1 for x in add | remove]])
            periodic = (off, base.periodic[1])

        def enum():
            extra = sorted(add)
            return (x for x in _merge_increasing(base.elements(), iter(extra)) if x not in remove)

        super().__init__(
            f"{base.name}+{sorted(add)}-{sorted(remove)}",
            lambda x: (x in base or x in add) and x not in remove,
            enum,
            periodic=periodic,
        )


def _merge_increasing(a: Iterator[int], b: Iterator[int]) -> Iterator[int]:
    """Merge two increasing iterators, dropping duplicates."""
    last = None
    for x in heapq.merge(a, b):
        if x != last:
            yield x
            last = x


def int_to_string(n: int) -> str:
    """Shortlex bijection N -> {0,1}*: 0 -> '', 1 -> '0', 2 -> '1', 3 -> '00', ..."""
    if n < 0:
        raise ValueError(f"strings are encoded by non-negative integers, got {n}")
    return bin(n + 1)[3:]


def string_to_int(s: str) -> int:
    """Inverse of :func:`int_to_string`."""
    if any(c not in "01" for c in s):
        raise ValueError(f"binary strings only, got {s!r}")
    return int("1" + s, 2) - 1


class DFALanguage(Language):
    r"""The language of a DFA over {0, 1} (strings encoded by :func:`int_to_string`).

    Args:
        delta: ``delta[q] = (next state on '0', next state on '1')``; start state 0.
        accept: accepting states.

    Subset tests between DFAs are exact: :math:`L_1 \subseteq L_2` iff no reachable state of
    the product automaton is accepting in the first and rejecting in the second.
    """

    def __init__(self, delta: Sequence[tuple[int, int]], accept: Iterable[int], name: str = ""):
        self.delta = tuple((int(a), int(b)) for a, b in delta)
        self.accept = frozenset(int(q) for q in accept)
        n = len(self.delta)
        if n == 0 or any(not (0 <= q < n) for pair in self.delta for q in pair):
            raise ValueError(f"bad DFA transition table {delta}")
        if any(not 0 <= q < n for q in self.accept):
            raise ValueError(f"accepting states {sorted(self.accept)} outside 0..{n - 1}")
        super().__init__(name or f"DFA{self.delta}/{sorted(self.accept)}", self._run, self._enum)
        self._can: list[frozenset[int]] = [self.accept]  # _can[r]: states accepting in r steps

    def _accepts_in(self, q: int, r: int) -> bool:
        while len(self._can) <= r:
            prev = self._can[-1]
            self._can.append(
                frozenset(s for s in range(len(self.delta)) if prev & set(self.delta[s]))
            )
        return q in self._can[r]

    def _of_length(self, n: int) -> Iterator[int]:
        """Accepted strings of length n in lexicographic order (DFS pruned by _accepts_in)."""
        if not self._accepts_in(0, n):
            return
        stack = [(0, "")]
        while stack:
            q, w = stack.pop()
            if len(w) == n:
                yield string_to_int(w)
                continue
            for c in (1, 0):  # pushed in reverse so '0' pops first
                r = self.delta[q][c]
                if self._accepts_in(r, n - len(w) - 1):
                    stack.append((r, w + str(c)))

    def _enum(self) -> Iterator[int]:
        """Shortlex order = increasing integer codes; stops for a finite language."""
        lengths = itertools.count() if self.is_infinite() else range(len(self.delta))
        for n in lengths:
            yield from self._of_length(n)

    def _run(self, x: int) -> bool:
        q = 0
        for c in int_to_string(x):
            q = self.delta[q][c == "1"]
        return q in self.accept

    def is_infinite(self) -> bool:
        """Some state reachable from the start and co-reachable to acceptance lies on a cycle."""
        n = len(self.delta)
        reach = _closure({0}, lambda q: self.delta[q])
        rev: dict[int, set[int]] = {q: set() for q in range(n)}
        for q in range(n):
            for r in self.delta[q]:
                rev[r].add(q)
        coreach = _closure(set(self.accept), lambda q: rev[q])
        useful = reach & coreach
        for q in useful:  # q on a cycle inside the useful part
            nxt = {r for r in self.delta[q] if r in useful}
            if q in _closure(nxt, lambda s: [r for r in self.delta[s] if r in useful]):
                return True
        return False

    def subset_of(self, other: Language) -> bool | None:
        if not isinstance(other, DFALanguage):
            return None
        start = (0, 0)
        seen = _closure(
            {start}, lambda p: [(self.delta[p[0]][c], other.delta[p[1]][c]) for c in (0, 1)]
        )
        return not any(a in self.accept and b not in other.accept for a, b in seen)


def _closure(start: set, step) -> set:
    seen, stack = set(start), list(start)
    while stack:
        for r in step(stack.pop()):
            if r not in seen:
                seen.add(r)
                stack.append(r)
    return seen


class Collection:
    r"""A countable collection :math:`L_0, L_1, \dots` (held as a finite prefix of it).

    The generator at step :math:`t` considers :math:`L_0, \dots, L_{t-1}` (all of the prefix
    once :math:`t` exceeds its length). Each language's enumeration is validated against its
    oracle on construction.
    """

    def __init__(self, languages: Iterable[Language], validate: int = 16):
        self.languages = list(languages)
        if not self.languages:
            raise ValueError("a collection needs at least one language")
        for lang in self.languages:
            lang.validate(validate)
        n = len(self.languages)
        self._subset: list[list[bool | None]] = [[None] * n for _ in range(n)]
        self._known = [[False] * n for _ in range(n)]

    def __len__(self) -> int:
        return len(self.languages)

    def __getitem__(self, i: int) -> Language:
        return self.languages[i]

    def index(self, name: str) -> int:
        for i, lang in enumerate(self.languages):
            if lang.name == name:
                return i
        raise ValueError(f"no language named {name!r} in the collection")

    def subset(self, i: int, j: int, window: int | None = None) -> bool:
        r""":math:`L_i \subseteq L_j`: exact (cached) where decidable, else on :math:`[0, window)`.

        Raises:
            ValueError: no exact test and no window given.
        """
        if not self._known[i][j]:
            self._subset[i][j] = True if i == j else self.languages[i].subset_of(self.languages[j])
            self._known[i][j] = True
        exact = self._subset[i][j]
        if exact is not None:
            return exact
        if window is None:
            raise ValueError(
                f"no exact subset test for {self.languages[i].name} vs {self.languages[j].name}; "
                "pass a window"
            )
        return all(x in self.languages[j] for x in range(window) if x in self.languages[i])

    def all_exact(self) -> bool:
        """Whether every pairwise subset test is exact."""
        n = len(self)
        try:
            for i in range(n):
                for j in range(n):
                    self.subset(i, j)
        except ValueError:
            return False
        return True


def arithmetic_collection(max_d: int, extra: Iterable[Language] = ()) -> Collection:
    r"""All :math:`AP(a, d)`, :math:`1 \le d \le` ``max_d``, :math:`0 \le a < d`, in (d, a)
    order (so :math:`\mathbb N = AP(0,1)` is :math:`L_0` and the evens are :math:`L_1`), then
    ``extra``.
    """
    aps = [ArithmeticProgression(a, d) for d in range(1, max_d + 1) for a in range(d)]
    return Collection([*aps, *extra])


def dfa_collection(max_states: int, limit: int | None = None) -> Collection:
    """Distinct infinite regular languages of DFAs over {0,1} with 1..``max_states`` states.

    DFAs are enumerated by size, then transition table, then accepting set; finite languages
    and languages equal to an earlier one are skipped.
    """
    out: list[DFALanguage] = []
    for n in range(1, max_states + 1):
        for table in itertools.product(range(n), repeat=2 * n):
            delta = [(table[2 * q], table[2 * q + 1]) for q in range(n)]
            for r in range(1, n + 1):
                for acc in itertools.combinations(range(n), r):
                    lang = DFALanguage(delta, acc)
                    if not lang.is_infinite():
                        continue
                    if any(lang.subset_of(o) and o.subset_of(lang) for o in out):
                        continue
                    out.append(lang)
                    if limit is not None and len(out) >= limit:
                        return Collection(out)
    return Collection(out)
