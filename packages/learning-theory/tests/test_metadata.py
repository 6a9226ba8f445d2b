from importlib.metadata import version

import learning_theory


def test_version_matches_metadata():
    assert learning_theory.__version__ == version("learning-theory")
