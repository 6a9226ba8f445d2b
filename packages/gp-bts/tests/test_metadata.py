from importlib.metadata import version

import gp_bts


def test_version_matches_metadata():
    assert gp_bts.__version__ == version("gp-bts")
