"""Every docstring example of the library modules runs and prints what it says."""

import doctest
import importlib

import pytest

MODULES = [
    "langevin",
    "optim",
    "models",
    "ntk",
    "layerwise",
    "kernels",
    "bounds",
    "deep_bounds",
    "stability_radius",
    "step_bias",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(f"langevin_ntk.{name}")
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert res.attempted > 0 and res.failed == 0
