from importlib.metadata import version

import segre


def test_version_matches_metadata():
    assert segre.__version__ == version("segre")
