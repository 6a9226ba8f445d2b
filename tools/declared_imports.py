"""Every import of a member must come from a dependency it declares.

A package that imports something only the workspace happens to have installed works here and
breaks after `pip install <package>`. This check reads each library member's source with `ast`
and its `pyproject.toml`, and reports:

1. an import of a third-party top-level module that no declared requirement (core or extra)
   provides;
2. a module-level import of something only an *extra* provides, in a module outside
   `experiments/` (plain `import <package>` must work after a plain install; extras belong in
   function bodies, behind `try: ... except ImportError`, or under `if TYPE_CHECKING:`).
   Experiment modules may import their extras at the top: they run with the extras installed.

The standard library is `sys.stdlib_module_names`. A requirement provides the import named like
it (lowercase, `-` -> `_`) unless `IMPORT_NAMES` says otherwise; add a row there for a new
dependency whose import name differs.

    python tools/declared_imports.py            # this workspace; exit 1 on a violation
    python tools/declared_imports.py --root DIR
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workspace import ROOT, library_members

# Distributions whose import name is not their normalised distribution name.
IMPORT_NAMES: dict[str, set[str]] = {
    "scikit-learn": {"sklearn"},
    "traker": {"trak"},
    "xgboost-cpu": {"xgboost"},
    "pyyaml": {"yaml"},
    "pillow": {"PIL"},
    "opencv-python": {"cv2"},
    "beautifulsoup4": {"bs4"},
}


@dataclass(frozen=True)
class Violation:
    member: str
    file: str
    line: int
    module: str
    why: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.module!r}: {self.why} ({self.member})"


def _req_name(req: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def provided(requirements: list[str]) -> set[str]:
    """Top-level import names the requirements provide."""
    out: set[str] = set()
    for req in requirements:
        name = _req_name(req)
        out |= IMPORT_NAMES.get(name, {name.replace("-", "_")})
    return out


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside a function/class body, a try block, or `if TYPE_CHECKING:`."""
    cur = parents.get(node)
    while cur is not None:
        if isinstance(cur, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Try):
            return True
        if isinstance(cur, ast.If) and "TYPE_CHECKING" in ast.unparse(cur.test):
            return True
        cur = parents.get(cur)
    return False


def _imports(tree: ast.AST):
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0], _guarded(node, parents)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0], _guarded(node, parents)


def check_member(folder: Path, dist: str, module: str) -> list[Violation]:
    meta = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    core = provided(meta.get("dependencies", []))
    extras = provided([r for reqs in meta.get("optional-dependencies", {}).values() for r in reqs])
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    out = []
    src = folder / "src" / module
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(folder).as_posix()
        in_experiments = "experiments" in path.relative_to(src).parts[:-1]
        for line, name, guarded in _imports(ast.parse(path.read_text(), filename=rel)):
            if name in stdlib or name == module:
                continue
            if name not in core | extras:
                why = "imported but not declared in dependencies or any extra"
                out.append(Violation(dist, f"{folder.name}/{rel}", line, name, why))
            elif name not in core and not guarded and not in_experiments:
                why = "only an extra provides it, yet it is imported at module level"
                out.append(Violation(dist, f"{folder.name}/{rel}", line, name, why))
    return out


def check(root: Path = ROOT) -> list[Violation]:
    out: list[Violation] = []
    for m in library_members(root):
        if m.module is not None:
            out += check_member(root / m.path, m.dist, m.module)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--root", type=Path, default=ROOT)
    args = p.parse_args(argv)
    violations = check(args.root)
    for v in violations:
        print(v)
    if violations:
        print(f"{len(violations)} undeclared import(s): declare them in the member's pyproject")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
