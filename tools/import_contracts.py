"""Check the dependency rule of the design with import-linter.

The rule: ``shared_core`` imports no package of the suite; a package imports ``shared_core``
and itself only (never a sibling); only ``integration-tests`` (which ships no module) may use
several. The contracts are generated from the workspace members, so a new package is covered
the moment its folder exists:

- a ``layers`` contract: every package above ``shared_core`` (so shared_core cannot import up);
- an ``independence`` contract between the packages.

import-linter does the analysis; this script only writes its configuration and puts every
member's ``src`` on the path, so it also works on a tree nothing has been installed from.

    python tools/import_contracts.py              # this workspace
    python tools/import_contracts.py --root DIR   # another tree (the tests use a fixture)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workspace import ROOT, library_members


def contracts_ini(core: str, packages: list[str]) -> str:
    lines = ["[importlinter]", f"root_packages =\n    {core}"]
    lines += [f"    {p}" for p in packages]
    lines += ["include_external_packages = False", ""]
    lines += [
        "[importlinter:contract:core-is-the-bottom-layer]",
        "name = shared_core imports no package of the suite",
        "type = layers",
        "layers =",
        "    " + " | ".join(packages),
        f"    {core}",
        "",
    ]
    if len(packages) >= 2:
        lines += [
            "[importlinter:contract:packages-are-independent]",
            "name = a package imports shared_core and itself only",
            "type = independence",
            "modules =",
            *[f"    {p}" for p in packages],
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--root", type=Path, default=ROOT)
    args = p.parse_args(argv)
    root = args.root.resolve()
    ms = [m for m in library_members(root) if m.module]
    core = [m for m in ms if m.dist == "shared-core"]
    if not core:
        print(f"no shared-core member under {root}", file=sys.stderr)
        return 2
    packages = [m.module for m in ms if m.dist != "shared-core"]
    if not packages:
        print("import contracts: no packages besides shared_core yet; nothing to separate")
        return 0
    exe = shutil.which("lint-imports")
    if exe is None:
        print(
            "lint-imports not found: install import-linter (it is in the dev group)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "contracts.ini"
        cfg.write_text(contracts_ini(core[0].module, packages))
        env = dict(os.environ)
        src_paths = [str(root / m.path / "src") for m in ms]
        env["PYTHONPATH"] = os.pathsep.join([*src_paths, env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
        return subprocess.run(
            [exe, str(cfg), "--no-cache"], env=env, cwd=tmp, check=False
        ).returncode


if __name__ == "__main__":
    raise SystemExit(main())
