from importlib.metadata import version

import trak_theory


def test_version_matches_metadata():
    assert trak_theory.__version__ == version("trak-theory")
