from importlib.metadata import version

import adaptive_lmo


def test_version_matches_metadata():
    assert adaptive_lmo.__version__ == version("adaptive-lmo")
