from importlib.metadata import version

import nfi


def test_version_matches_metadata():
    assert nfi.__version__ == version("nfi")
