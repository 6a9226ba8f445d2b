from importlib.metadata import version

import eps_completion


def test_version_matches_metadata():
    assert eps_completion.__version__ == version("eps-completion")
