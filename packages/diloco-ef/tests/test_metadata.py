from importlib.metadata import version

import diloco_ef


def test_version_matches_metadata():
    assert diloco_ef.__version__ == version("diloco-ef")
