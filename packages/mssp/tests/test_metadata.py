from importlib.metadata import version

import mssp


def test_version_matches_metadata():
    assert mssp.__version__ == version("mssp")
