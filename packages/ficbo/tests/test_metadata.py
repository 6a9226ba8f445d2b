from importlib.metadata import version

import ficbo


def test_version_matches_metadata():
    assert ficbo.__version__ == version("ficbo")
