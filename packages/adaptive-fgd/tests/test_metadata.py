from importlib.metadata import version

import adaptive_fgd


def test_version_matches_metadata():
    assert adaptive_fgd.__version__ == version("adaptive-fgd")
