from importlib.metadata import version

import heavytail_sgd


def test_version_matches_metadata():
    assert heavytail_sgd.__version__ == version("heavytail-sgd")
