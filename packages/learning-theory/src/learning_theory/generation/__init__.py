"""Language generation in the limit: collections, adversaries, generators, metrics.

See :mod:`.languages`, :mod:`.game` and :mod:`.metrics`.
"""

from .game import (
    Adversary,
    Enumeration,
    ExploringGenerator,
    Generator,
    KMGenerator,
    PartialNoveltyGenerator,
    Run,
    Stalling,
    Withholding,
    constant_rate,
    perfect_squares,
    play,
)
from .languages import (
    ArithmeticProgression,
    Collection,
    DFALanguage,
    FiniteVariation,
    Language,
    arithmetic_collection,
    dfa_collection,
    int_to_string,
    string_to_int,
)
from .metrics import (
    invalid_frequency,
    km_validity_time,
    mistakes,
    novelty_fraction,
    precision,
    precision_curve,
    recall,
    recall_curve,
    time_to_validity,
)

__all__ = [
    "Adversary",
    "ArithmeticProgression",
    "Collection",
    "DFALanguage",
    "Enumeration",
    "ExploringGenerator",
    "FiniteVariation",
    "Generator",
    "KMGenerator",
    "Language",
    "PartialNoveltyGenerator",
    "Run",
    "Stalling",
    "Withholding",
    "arithmetic_collection",
    "constant_rate",
    "dfa_collection",
    "int_to_string",
    "invalid_frequency",
    "km_validity_time",
    "mistakes",
    "novelty_fraction",
    "perfect_squares",
    "play",
    "precision",
    "precision_curve",
    "recall",
    "recall_curve",
    "string_to_int",
    "time_to_validity",
]
