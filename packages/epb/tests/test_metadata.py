from importlib.metadata import version

import epb


def test_version_matches_metadata():
    assert epb.__version__ == version("epb")
