import doctest
import importlib

import pytest

MODULES = [
    "gp_bts.regret",
    "gp_bts.info_gain",
    "gp_bts.bounds",
    "gp_bts.policy",
    "gp_bts.objectives",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
