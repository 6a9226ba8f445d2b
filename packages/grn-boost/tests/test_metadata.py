from importlib.metadata import version

import grn_boost


def test_version_matches_metadata():
    assert grn_boost.__version__ == version("grn-boost")
