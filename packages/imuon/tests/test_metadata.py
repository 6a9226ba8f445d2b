from importlib.metadata import version

import imuon


def test_version_matches_metadata():
    assert imuon.__version__ == version("imuon")
