"""Every docstring example runs and prints what it says."""

import doctest
import importlib

import pytest

MODULES = [
    "learning_theory.bounds",
    "learning_theory.compression",
    "learning_theory.generation.languages",
    "learning_theory.generation.game",
    "learning_theory.generation.metrics",
    "learning_theory.high_arity",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert res.attempted > 0 and res.failed == 0
