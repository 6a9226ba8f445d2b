from importlib.metadata import version

import langevin_ntk


def test_version_matches_metadata():
    assert langevin_ntk.__version__ == version("langevin-ntk")
