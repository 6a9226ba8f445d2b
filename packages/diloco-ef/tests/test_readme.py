"""Every python block of the README's Usage section runs as written."""

from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).parents[1] / "README.md"


def usage_blocks() -> list[str]:
    text = README.read_text()
    section = text[text.index("## Usage") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


def test_usage_has_the_engine_and_the_hook_examples():
    blocks = usage_blocks()
    assert len(blocks) == 2 and "DiLoCoHook" in blocks[1]


@pytest.mark.parametrize("index", [0, 1])
def test_usage_block_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the first block writes ckpt.pt
    exec(compile(usage_blocks()[index], f"README usage block {index}", "exec"), {})
