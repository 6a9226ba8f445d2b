from importlib.metadata import version

import gdro_fsq


def test_version_matches_metadata():
    assert gdro_fsq.__version__ == version("gdro-fsq")
