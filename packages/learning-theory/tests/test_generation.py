"""Languages, adversaries, generators and run metrics of the generation game."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learning_theory.generation import (
    ArithmeticProgression,
    Collection,
    DFALanguage,
    Enumeration,
    ExploringGenerator,
    FiniteVariation,
    KMGenerator,
    Language,
    PartialNoveltyGenerator,
    Run,
    Stalling,
    Withholding,
    arithmetic_collection,
    constant_rate,
    dfa_collection,
    int_to_string,
    invalid_frequency,
    km_validity_time,
    mistakes,
    novelty_fraction,
    perfect_squares,
    play,
    precision,
    precision_curve,
    recall,
    recall_curve,
    string_to_int,
    time_to_validity,
)

# ---------------------------------------------------------------- languages


def test_ap_subset_matches_the_divisibility_rule():
    aps = [ArithmeticProgression(a, d) for d in range(1, 8) for a in range(9)]
    for p, q in itertools.product(aps, aps):
        rule = p.d % q.d == 0 and p.a >= q.a and (p.a - q.a) % q.d == 0
        assert p.subset_of(q) == rule, (p.name, q.name)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 5),
    st.integers(1, 6),
    st.sets(st.integers(0, 40), max_size=4),
    st.sets(st.integers(0, 40), max_size=4),
    st.integers(0, 5),
    st.integers(1, 6),
)
def test_finite_variation_enumeration_and_subset_against_brute_force(a, d, add, rem, a2, d2):
    rem = rem - add
    L = FiniteVariation(ArithmeticProgression(a, d), add, rem)
    M = FiniteVariation(ArithmeticProgression(a2, d2), rem, add)
    head = list(itertools.islice(L.elements(), 30))
    assert head == sorted(head) and all(x in L for x in head)
    assert head == [x for x in range(600) if x in L][:30]
    brute = all(x in M for x in range(2_000) if x in L)  # beyond 40 + lcm <= 70 all repeats
    assert L.subset_of(M) == brute


def test_string_encoding_is_a_bijection_in_shortlex_order():
    strings = [int_to_string(n) for n in range(63)]
    expected = ["".join(s) for k in range(6) for s in itertools.product("01", repeat=k)]
    assert strings == expected
    assert all(string_to_int(s) == n for n, s in enumerate(strings))
    with pytest.raises(ValueError, match="binary"):
        string_to_int("012")


def test_dfa_subset_and_infiniteness_against_brute_force():
    C = dfa_collection(3, limit=40)
    n_strings = 2**10 - 1  # all strings of length <= 9 > 3*3 product states
    members = [np.array([x in L for x in range(n_strings)]) for L in C.languages]
    for i, j in itertools.product(range(len(C)), repeat=2):
        assert C.subset(i, j) == bool((~members[i] | members[j]).all())
    for L in C.languages:
        # pumping: infinite iff some accepted string has length in [n, 2n)
        n = len(L.delta)
        long = [x for x in range(2 ** (2 * n) - 1) if n <= len(int_to_string(x)) < 2 * n]
        assert L.is_infinite() == any(x in L for x in long) and L.is_infinite()
    finite = DFALanguage([(1, 1), (1, 1)], [0])  # only the empty string
    assert not finite.is_infinite()


def test_bad_languages_raise():
    empty = Language("empty", lambda x: False, lambda: iter([]))
    with pytest.raises(ValueError, match="empty enumeration"):
        empty.validate()
    with pytest.raises(ValueError, match="empty enumeration"):
        Enumeration(empty)
    liar = Language("liar", lambda x: x % 2 == 0, lambda: iter([0, 1, 2]))
    with pytest.raises(ValueError, match="disagree"):
        Collection([liar])
    with pytest.raises(ValueError, match="disagree"):
        Enumeration(liar)
    with pytest.raises(ValueError, match="repeats"):
        Language("rep", lambda x: True, lambda: iter([3, 3])).validate()
    with pytest.raises(ValueError, match="at least one"):
        Collection([])
    with pytest.raises(ValueError, match="d >= 1"):
        ArithmeticProgression(0, 0)
    evens = ArithmeticProgression(0, 2)
    with pytest.raises(ValueError, match="withheld"):
        play(KMGenerator(Collection([evens])), Withholding(evens, evens), 1)
    finite = Language("fin", lambda x: x < 3, lambda: iter([0, 1, 2]))
    C = Collection([finite])
    with pytest.raises(ValueError, match="enumeration ended"):
        play(KMGenerator(C), Enumeration(finite), 5)
    with pytest.raises(ValueError, match="no exact subset"):
        Collection(
            [Language("sq", lambda x: math.isqrt(x) ** 2 == x), ArithmeticProgression(0, 1)]
        ).subset(0, 1)


# ---------------------------------------------------------------- KM validity


def _shuffled(lang, seed, block=7):
    """The same language, enumerated block by block in a random order inside each block."""

    def enum():
        rng = np.random.default_rng(seed)
        it = lang.elements()
        while True:
            chunk = list(itertools.islice(it, block))
            yield from (int(x) for x in rng.permutation(chunk))

    return Language(lang.name + "~", lang.__contains__, enum)


def _check_valid_after_claim(C, z, adversary, steps):
    run = play(KMGenerator(C), adversary, steps)
    t_plus = km_validity_time(C, z, run.presented)
    assert t_plus is not None and t_plus <= steps
    assert all(o in C[z] for o in run.outputs[t_plus - 1 :])
    assert len(set(run.outputs)) == steps and not set(run.outputs) & set(run.presented[:1])
    return run, t_plus


def test_km_outputs_are_valid_after_the_claimed_time_on_progressions():
    C = arithmetic_collection(6)
    for z in range(len(C)):
        for seed in range(3):
            adv = Enumeration(C[z]) if seed == 0 else Enumeration(_shuffled(C[z], seed))
            _check_valid_after_claim(C, z, adv, 120)


def test_km_outputs_are_valid_after_the_claimed_time_on_regular_languages():
    C = dfa_collection(3, limit=40)
    for z in range(len(C)):
        _check_valid_after_claim(C, z, Enumeration(_shuffled(C[z], z)), 100)


def test_km_makes_mistakes_before_the_claim_against_a_staller():
    # the claim is not vacuous: the staller keeps the odds consistent until step P
    C = arithmetic_collection(6)
    z = C.index("AP(1,3)")
    run, t_plus = _check_valid_after_claim(C, z, Stalling(C[z], C, patience=40), 200)
    assert t_plus == 40 and mistakes(run, C[z]) > 5
    assert time_to_validity(run, C[z]) <= t_plus


def test_window_subset_variant_converges_on_membership_only_languages():
    sq = Language("squares", lambda x: math.isqrt(x) ** 2 == x)
    ev = Language("evens", lambda x: x % 2 == 0)
    C = Collection([Language("all", lambda x: True), ev, sq])
    run = play(KMGenerator(C, window=lambda t: 16 + 4 * t), Enumeration(ev), 60)
    assert all(o % 2 == 0 for o in run.outputs[5:])


# ---------------------------------------------------------------- variants


def test_exploring_generator_mistakes_have_vanishing_frequency():
    C = arithmetic_collection(4)
    T = 2500
    run = play(ExploringGenerator(C, perfect_squares), Enumeration(C[1]), T)  # target: evens
    bad = [t for t, o in enumerate(run.outputs, 1) if o % 2]
    assert bad == [t * t for t in range(1, 51)]  # exactly the perfect squares
    assert invalid_frequency(run, C[1]) == pytest.approx(50 / T)
    curve = precision_curve(run, C[1])
    assert curve[99] < curve[999] < curve[-1]


def test_exploring_beats_km_on_the_withheld_part_and_keeps_precision_one():
    C = arithmetic_collection(4)
    T, W = 2500, 80
    km = play(KMGenerator(C), Withholding(C[0], C[2]), T)  # target N, odds withheld
    ex = play(ExploringGenerator(C, perfect_squares), Withholding(C[0], C[2]), T)
    assert precision(km, C[0]) == precision(ex, C[0]) == 1.0
    assert recall(km, C[0], W, unseen_only=True) <= 1 / 40  # only the step-1 output is odd
    assert recall(ex, C[0], W, unseen_only=True) == 1.0
    assert recall(ex, C[0], W) > recall(km, C[0], W)


def test_constant_rate_and_partial_novelty_counts():
    sched = constant_rate(0.3)
    assert sum(sched(t) for t in range(1, 101)) == 30
    C = arithmetic_collection(4)
    run = play(PartialNoveltyGenerator(C, 0.25), Enumeration(C[1]), 101)
    assert novelty_fraction(run) == pytest.approx(25 / 101)
    repeats = [
        o
        for t, o in enumerate(run.outputs, 1)
        if math.floor(0.25 * t) == math.floor(0.25 * (t - 1))
    ]
    assert all(o in C[1] for o in repeats)
    with pytest.raises(ValueError, match="alpha"):
        PartialNoveltyGenerator(C, 0.0)
    with pytest.raises(ValueError, match="rate"):
        constant_rate(1.5)


# ---------------------------------------------------------------- metrics on hand-built runs


def test_metrics_on_a_hand_built_run():
    K = ArithmeticProgression(0, 3)  # 0, 3, 6, 9, ...
    run = Run(presented=[0, 3, 6, 9, 12], outputs=[1, 3, 9, 15, 18])
    # valid: 3, 9, 15, 18 -> 4 of 5; last invalid at step 1 -> valid from step 2
    assert invalid_frequency(run, K) == pytest.approx(1 / 5)
    assert precision(run, K) == pytest.approx(4 / 5)
    assert mistakes(run, K) == 1 and time_to_validity(run, K) == 2
    assert precision_curve(run, K).tolist() == pytest.approx([0, 1 / 2, 2 / 3, 3 / 4, 4 / 5])
    # novel: 1 (not seen), 3 (seen at step 2: no), 9 (seen at 4 only: yes at step 3), 15, 18
    assert novelty_fraction(run) == pytest.approx(4 / 5)
    # K below 21 = {0,3,6,9,12,15,18}; outputs hit 3, 9, 15, 18 -> 4/7
    assert recall(run, K, 21) == pytest.approx(4 / 7)
    # unseen part below 21 = {15, 18}; both generated
    assert recall(run, K, 21, unseen_only=True) == 1.0
    assert recall_curve(run, K, 21, [1, 3, 5]) == pytest.approx([0, 2 / 7, 4 / 7])
    late = Run(presented=[0, 3], outputs=[3, 4])
    assert time_to_validity(late, K) == 3  # T + 1: not yet valid


def test_metric_errors():
    K = ArithmeticProgression(5, 3)
    with pytest.raises(ValueError, match="no outputs"):
        precision(Run(), K)
    with pytest.raises(ValueError, match="recall undefined"):
        recall(Run([5], [8]), K, 5)
    with pytest.raises(ValueError, match="not in the target"):
        km_validity_time(arithmetic_collection(3), 1, [1])
