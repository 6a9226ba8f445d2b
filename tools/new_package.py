"""Scaffold a new package from templates/package/.

    python tools/new_package.py my-method [--description "One line."] [--root DIR]

Creates packages/my-method/ (dist ``my-method``, import ``my_method``): every ``*.tmpl`` file
is copied without its suffix, ``__module__`` in paths becomes the import name, and
``{{dist}}``, ``{{module}}``, ``{{description}}`` in the text are filled in.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "templates" / "package"
NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def scaffold(dist: str, description: str, root: Path = ROOT) -> Path:
    if not NAME.match(dist):
        raise ValueError(
            "package name must be lowercase words joined by hyphens (e.g. 'my-method'), "
            f"got {dist!r}"
        )
    module = dist.replace("-", "_")
    target = root / "packages" / dist
    if target.exists():
        raise ValueError(f"{target} already exists")
    values = {"{{dist}}": dist, "{{module}}": module, "{{description}}": description}
    for src in sorted(TEMPLATE.rglob("*.tmpl")):
        rel = src.relative_to(TEMPLATE).as_posix().replace("__module__", module)
        dst = target / rel.removesuffix(".tmpl")
        text = src.read_text()
        if dst.suffix == ".py":
            # a long description would break the line limit of the module docstring
            text = text.replace("{{description}}", textwrap.fill(description, width=96))
        for key, value in values.items():
            text = text.replace(key, value)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(text)
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("dist")
    p.add_argument("--description", default="A frontier-opt package.")
    p.add_argument("--root", type=Path, default=ROOT)
    args = p.parse_args(argv)
    try:
        target = scaffold(args.dist, args.description, args.root)
    except ValueError as err:
        print(f"new_package: {err}", file=sys.stderr)
        return 2
    print(f"created {target}; next: add it to integration-tests/pyproject.toml, then `uv lock`")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
