"""The documentation site: every member's README, its ``docs/`` pages and its API reference.

    python tools/docs_site.py            # assemble build/docs_site/ and run `mkdocs build --strict`
    python tools/docs_site.py --serve    # the same, served with live reload
    python tools/docs_site.py --assemble-only

Members are discovered as everywhere else (``tools/workspace.py``): adding a package adds its
section, nothing here names packages. Each section holds the member's README as its overview,
every Markdown file under its ``docs/`` (derivations, diagnoses, probe logs: what a README
should not carry), and an API page rendered by mkdocstrings from the docstrings of the
module's public names. Images the pages reference are copied beside them; links to repository
files that are not pages (benchmarks' JSON, source files) are left as they are and reported at
info level, since they resolve on GitHub rather than on the site. ``nox -s docs`` runs this
with warnings as errors (``--strict``) in CI.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workspace import ROOT, library_members

OUT = ROOT / "build" / "docs_site"
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
_LINK = re.compile(r"(\]\()([^)\s#]+README\.md)(#[^)\s]*)?(\))")

MKDOCS_HEAD = """\
site_name: frontier-opt
site_description: Optimization papers of 2026 as installable packages
docs_dir: pages
site_dir: site
theme:
  name: material
  features: [navigation.sections, navigation.indexes, content.code.copy, search.highlight]
markdown_extensions:
  - tables
  - admonition
  - toc:
      permalink: true
  - pymdownx.superfences
  - pymdownx.arithmatex:
      generic: true
validation:
  nav:
    omitted_files: warn
    not_found: warn
  links:
    not_found: info
    anchors: info
    unrecognized_links: info
plugins:
  - search
  - mkdocstrings:
      default_handler: python
      handlers:
        python:
          paths: [{paths}]
          options:
            extensions: ["{ext}:ExampleSections"]
            docstring_style: google
            show_source: false
            show_root_heading: true
            show_submodules: false
            members_order: source
            merge_init_into_class: true
            show_if_no_docstring: false
            docstring_options:
              warn_unknown_params: false
              warn_missing_types: false
"""


def _readme_pages(pages: Path) -> dict[Path, Path]:
    """Each member's README (and the root one) -> its page on the site."""
    found = {(ROOT / "README.md").resolve(): pages / "index.md"}
    for m in library_members(ROOT):
        found[(ROOT / m.path / "README.md").resolve()] = pages / m.dist / "index.md"
    return found


def _copy_page(src: Path, dest: Path) -> None:
    """Copy one Markdown page and the local images it shows (missing ones are left out);
    links to a member's README point to that member's page on the site."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    text = src.read_text(encoding="utf-8")
    readmes = _readme_pages(OUT / "pages")

    def relink(m: re.Match) -> str:
        page = readmes.get((src.parent / m.group(2)).resolve())
        if page is None:
            return m.group(0)
        rel = Path(os.path.relpath(page, dest.parent)).as_posix()
        return f"{m.group(1)}{rel}{m.group(3) or ''}{m.group(4)}"

    text = _LINK.sub(relink, text)
    dest.write_text(text, encoding="utf-8")
    for target in _IMAGE.findall(text):
        if "://" in target or target.startswith("/"):
            continue
        img = (src.parent / target).resolve()
        if img.is_file() and ROOT in img.parents:
            out = (dest.parent / target).resolve()
            if OUT in out.parents:
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(img, out)


def _exports(init: Path) -> list[str]:
    """The names in a module's literal ``__all__`` (empty when it states none)."""
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            try:
                return [str(v) for v in ast.literal_eval(node.value)]
            except ValueError:
                return []
    return []


def api_modules(src: Path, module: str) -> list[str]:
    """The modules an API page renders: the package itself when its ``__init__`` exports the
    API, else each public submodule (a package that only documents its subpackages, such as
    shared-core, would otherwise render as an empty page). Experiments are not API."""
    pkg = src / module
    if [n for n in _exports(pkg / "__init__.py") if not n.startswith("__")]:
        return [module]
    children = sorted(
        p.stem if p.suffix == ".py" else p.name
        for p in pkg.iterdir()
        if not p.name.startswith("_")
        and p.name != "experiments"
        and ((p.suffix == ".py") or (p / "__init__.py").is_file())
    )
    return [module, *(f"{module}.{c}" for c in children)]


def assemble(out: Path = OUT) -> Path:
    """Write ``out/pages`` and ``out/mkdocs.yml``; return the config's path."""
    pages = out / "pages"
    if pages.exists():
        shutil.rmtree(pages)
    _copy_page(ROOT / "README.md", pages / "index.md")
    nav = ["  - Home: index.md"]
    for m in library_members(ROOT):
        folder = ROOT / m.path
        nav.append(f"  - {m.dist}:")
        _copy_page(folder / "README.md", pages / m.dist / "index.md")
        nav.append(f"    - {m.dist}/index.md")
        for doc in sorted((folder / "docs").rglob("*.md")) if (folder / "docs").is_dir() else []:
            rel = doc.relative_to(folder / "docs")
            _copy_page(doc, pages / m.dist / "docs" / rel)
            title = doc.stem.replace("_", " ").replace("-", " ").capitalize()
            nav.append(f"    - {title}: {m.dist}/docs/{rel.as_posix()}")
        if m.module:
            api = pages / m.dist / "api.md"
            blocks = "\n".join(f"::: {name}\n" for name in api_modules(folder / "src", m.module))
            api.write_text(f"# {m.dist}: API reference\n\n{blocks}", encoding="utf-8")
            nav.append(f"    - API reference: {m.dist}/api.md")
    paths = ", ".join(f'"{(ROOT / m.path / "src").as_posix()}"' for m in library_members(ROOT))
    config = out / "mkdocs.yml"
    ext = (ROOT / "tools" / "griffe_examples.py").as_posix()
    head = MKDOCS_HEAD.format(paths=paths, ext=ext)
    config.write_text(head + "nav:\n" + "\n".join(nav) + "\n")
    return config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--assemble-only", action="store_true")
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--no-strict", action="store_true", help="warnings do not fail the build")
    args = ap.parse_args(argv)
    config = assemble()
    print(f"assembled {config.parent}")
    if args.assemble_only:
        return 0
    cmd = [sys.executable, "-m", "mkdocs", "serve" if args.serve else "build", "-f", str(config)]
    if not args.serve and not args.no_strict:
        cmd.append("--strict")
    return subprocess.run(cmd, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
