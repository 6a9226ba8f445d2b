from importlib.metadata import version

import gdro_fsq


def test_version_matches_metadata():
    assert gdro_fsq.__version__ == version("gdro-fsq")


def test_readme_usage_runs():
    import pathlib
    import re

    text = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    code = re.search(r"## Usage\n\n```python\n(.*?)```", text, re.S).group(1)
    assert len(code.splitlines()) <= 22
    scope: dict = {}
    exec(compile(code, "README-usage", "exec"), scope)
    opt = scope["opt"]
    assert opt.t == 500 and 500 <= opt.samples <= 5000
    assert opt.bound() > 0
