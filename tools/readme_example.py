"""Run a member's README usage example, as a user who just ran `pip install <member>` would.

The example is the first ```python block after the README's `## Usage` heading. It runs in a
fresh temporary folder (examples may write files), with this interpreter, so `nox -s build`
runs it against the wheel it installed alone, not against the workspace sources.

An example that needs an extra says so in a comment, as the user should read it, e.g.
`# pip install "shared-core[plot]"`; `nox -s build` installs the wheel with exactly the extras
named there (`--extras` prints them).

    python tools/readme_example.py packages/imuon            # exit 1 if the example fails
    python tools/readme_example.py packages/imuon --extras   # the extras it needs, comma-joined
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import tomllib
from pathlib import Path

_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def usage_code(readme: str) -> str:
    """The first python block of the `## Usage` section; ValueError if there is none."""
    match = re.search(r"^## Usage\b.*?$", readme, re.MULTILINE)
    if match is None:
        raise ValueError("the README has no '## Usage' section")
    section = readme[match.end() :]
    nxt = re.search(r"^## ", section, re.MULTILINE)
    section = section[: nxt.start()] if nxt else section
    block = _BLOCK.search(section)
    if block is None:
        raise ValueError("the README's Usage section has no ```python block")
    return block.group(1)


def usage_extras(code: str, dist: str) -> list[str]:
    """Extras named for ``dist`` by a ``# pip install "<dist>[a,b]"`` comment in the example."""
    pattern = rf"^#\s*pip install\s+[\"']?{re.escape(dist)}\[([^\]]+)\]"
    found: list[str] = []
    for m in re.finditer(pattern, code, re.MULTILINE):
        found += [e.strip() for e in m.group(1).split(",") if e.strip()]
    return sorted(set(found))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("member", type=Path, help="the member's folder")
    p.add_argument("--extras", action="store_true", help="print the extras it needs and exit")
    args = p.parse_args(argv)
    readme = (args.member / "README.md").read_text()
    try:
        code = usage_code(readme)
    except ValueError as err:
        print(f"{args.member}: {err}", file=sys.stderr)
        return 1
    if args.extras:
        meta = tomllib.loads((args.member / "pyproject.toml").read_text())
        print(",".join(usage_extras(code, meta["project"]["name"])))
        return 0
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            exec(
                compile(code, f"{args.member}/README.md (Usage)", "exec"), {"__name__": "__main__"}
            )
        finally:
            os.chdir(here)
    print(f"{args.member}: README usage example ran")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
