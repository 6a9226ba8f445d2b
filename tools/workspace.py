"""The workspace members, read from the root pyproject: the one list nox, CI and lint share.

A member is a folder matched by ``[tool.uv.workspace].members`` that has a ``pyproject.toml``.
Adding a package is adding its folder: nothing here or in the noxfile names packages.

    python tools/workspace.py            # one line per member: dist, path, import name
    python tools/workspace.py --json
"""

from __future__ import annotations

import argparse
import json
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Member:
    dist: str  # distribution name, e.g. "shared-core"
    path: str  # folder relative to the workspace root
    module: str | None  # import name under src/, or None for non-package members
    version: str
    is_package: bool  # False for `[tool.uv] package = false` members (integration-tests)


def _module_of(folder: Path, dist: str) -> str | None:
    src = folder / "src"
    guess = dist.replace("-", "_")
    if (src / guess / "__init__.py").is_file():
        return guess
    found = sorted(p.parent.name for p in src.glob("*/__init__.py")) if src.is_dir() else []
    return found[0] if found else None


def members(root: Path = ROOT) -> list[Member]:
    """Every workspace member under ``root``, shared-core first, then by path."""
    cfg = tomllib.loads((root / "pyproject.toml").read_text())
    globs = cfg["tool"]["uv"]["workspace"]["members"]
    exclude = set(cfg["tool"]["uv"]["workspace"].get("exclude", []))
    out: list[Member] = []
    seen: set[Path] = set()
    for pattern in globs:
        for folder in sorted(root.glob(pattern)):
            rel = folder.relative_to(root).as_posix()
            if folder in seen or rel in exclude or not (folder / "pyproject.toml").is_file():
                continue
            seen.add(folder)
            meta = tomllib.loads((folder / "pyproject.toml").read_text())
            project = meta["project"]
            is_package = meta.get("tool", {}).get("uv", {}).get("package", True)
            out.append(
                Member(
                    dist=project["name"],
                    path=rel,
                    module=_module_of(folder, project["name"]) if is_package else None,
                    version=project.get("version", "0"),
                    is_package=bool(is_package),
                )
            )
    out.sort(key=lambda m: (m.dist != "shared-core", m.path))
    return out


def library_members(root: Path = ROOT) -> list[Member]:
    """Members that ship a distribution (everything but integration-tests)."""
    return [m for m in members(root) if m.is_package]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--json", action="store_true")
    p.add_argument("--root", type=Path, default=ROOT)
    args = p.parse_args()
    ms = members(args.root)
    if args.json:
        print(json.dumps([asdict(m) for m in ms], indent=2))
    else:
        for m in ms:
            print(f"{m.dist}\t{m.path}\t{m.module or '-'}")


if __name__ == "__main__":
    main()
