"""Run the registered experiments and write one markdown report.

Registry: a package lists its experiments as entry points in its own ``pyproject.toml``
(name ``<package>.<experiment>``, value the module to run with ``python -m``), in one of two
groups::

    [project.entry-points."frontier_opt.experiments"]        # headline: the main job
    "imuon.conditioning" = "imuon.experiments.conditioning"

    [project.entry-points."frontier_opt.experiments.extra"]  # the rest: --all, --member
    "imuon.lora" = "imuon.experiments.lora"

so that installing a package is all it takes for ``nox -s repro`` to find it: nothing central
is edited. The runner starts each module in a fresh interpreter with ``--quick`` (or ``--full``)
and ``--out <report>/<name>``, then reads the ``result.json`` it wrote (see
:mod:`shared_core.experiment.run`).

Budget. The main job (headline experiments, quick mode) must finish in ``MAIN_JOB_BUDGET_S``
on a quiet 2-core machine, each headline experiment in ``QUICK_BUDGET_S``. A headline module
states its measured quick-mode time as a top-level ``QUICK_SECONDS = <number>`` (read from
its source, without importing it); the runner prints the expected total before it starts,
records the measured seconds in ``index.json``, and the integration tests fail when a
headline estimate is missing or over budget.

Usage::

    python -m shared_core.experiment.repro --quick --out reports/repro   # the main job
    python -m shared_core.experiment.repro --all                          # every experiment
    python -m shared_core.experiment.repro --member imuon                 # one package's
    python -m shared_core.experiment.repro --list [--all]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from .run import RESULT_FILE

__all__ = [
    "EXTRA_GROUP",
    "GROUP",
    "MAIN_JOB_BUDGET_S",
    "QUICK_BUDGET_S",
    "Entry",
    "discover",
    "discover_all",
    "main",
    "quick_estimate",
    "render_index",
    "run_all",
]

GROUP = "frontier_opt.experiments"
EXTRA_GROUP = "frontier_opt.experiments.extra"
#: Seconds one headline experiment may take in quick mode on a quiet 2-core machine.
QUICK_BUDGET_S = 90.0
#: Seconds the whole main job (every headline experiment, quick mode) may take there.
MAIN_JOB_BUDGET_S = 1200.0


@dataclass(frozen=True)
class Entry:
    name: str
    module: str
    dist: str | None
    headline: bool = True


def discover(group: str = GROUP) -> list[Entry]:
    """The experiments registered in ``group``, sorted by name; duplicate names are an error."""
    found: dict[str, Entry] = {}
    for ep in entry_points(group=group):
        if ep.name in found and found[ep.name].module != ep.value:
            raise ValueError(
                f"experiment {ep.name!r} is registered twice: {found[ep.name].module} "
                f"and {ep.value}"
            )
        if ":" in ep.value:
            raise ValueError(f"experiment {ep.name!r} must name a module, got {ep.value!r}")
        dist = ep.dist.name if ep.dist is not None else None
        found[ep.name] = Entry(ep.name, ep.value, dist, headline=group == GROUP)
    return [found[k] for k in sorted(found)]


def discover_all() -> list[Entry]:
    """Headline and extra experiments together, sorted by name; a name in both is an error."""
    head, extra = discover(GROUP), discover(EXTRA_GROUP)
    both = {e.name for e in head} & {e.name for e in extra}
    if both:
        raise ValueError(f"experiments registered as headline and extra: {sorted(both)}")
    return sorted(head + extra, key=lambda e: e.name)


def quick_estimate(module: str) -> float | None:
    """The module's top-level ``QUICK_SECONDS`` literal (its measured quick-mode time), read
    from its source without importing it; ``None`` when it states none."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a parent package that is not importable here
        return None
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "QUICK_SECONDS":
            value = getattr(node, "value", None)
            if isinstance(value, ast.Constant) and isinstance(value.value, int | float):
                return float(value.value)
            raise ValueError(f"{module}.QUICK_SECONDS must be a number literal")
    return None


_RULE_START = re.compile(
    r"^(?:[-*]\s*)?(?:the\s+)?(?:(?:verdict|pass)\s+)?(?:rules?|verdict)\b"
    r"|^`{1,2}holds`{1,2}|^holds\b|^claims? checked",
    re.IGNORECASE,
)


def _module_source(module: str) -> str | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin).read_text(encoding="utf-8")


def stated_rule(module: str, limit: int = 400) -> str | None:
    """The verdict rule an experiment module states in its docstring, on one line.

    The rule is the first paragraph (up to the next blank line) that starts with "Rule(s)",
    "Verdict", "Pass rule", "Holds", "``holds``" or "Claims checked", with the paragraph after
    it when it ends in a colon (a heading for a list); it is cut at ``limit`` characters.
    ``None`` when the module states none (or cannot be found).
    """
    src = _module_source(module)
    doc = ast.get_docstring(ast.parse(src)) if src else None
    if not doc:
        return None
    paras = [p.strip() for p in re.split(r"\n\s*\n", doc)]
    for i, para in enumerate(paras):
        if _RULE_START.match(para):
            if para.endswith(":") and i + 1 < len(paras):  # a heading for the list below it
                para = f"{para} {paras[i + 1]}"
            text = " ".join(para.split()).replace("``", "`")
            return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
    return None


def _run_one(entry: Entry, out: Path, mode: str, timeout: float) -> dict[str, Any]:
    run_dir = out / entry.name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RESULT_FILE).unlink(missing_ok=True)  # never report a stale result
    cmd = [sys.executable, "-m", entry.module, f"--{mode}", "--out", str(run_dir)]
    print(f"[repro] {entry.name}: {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, timeout=timeout, check=False)
        status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        status = f"failed (timed out after {timeout:.0f} s)"
    seconds = time.perf_counter() - t0
    result_path = run_dir / RESULT_FILE
    if status == "ok" and not result_path.is_file():
        status = f"failed (no {RESULT_FILE} written)"
    result = json.loads(result_path.read_text()) if status == "ok" else None
    return {
        "name": entry.name,
        "module": entry.module,
        "dist": entry.dist,
        "headline": entry.headline,
        "estimate_seconds": quick_estimate(entry.module) if mode == "quick" else None,
        "status": status,
        "seconds": seconds,
        "rule": (result or {}).get("rule") or stated_rule(entry.module),
        "result": result,
    }


def run_all(
    entries: Sequence[Entry], out: Path, *, mode: str = "quick", timeout: float = 1200.0
) -> list[dict[str, Any]]:
    """Run each entry in its own interpreter; a failure is recorded, not raised."""
    if mode not in ("quick", "full"):
        raise ValueError(f"mode must be 'quick' or 'full', got {mode!r}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
    out.mkdir(parents=True, exist_ok=True)
    return [_run_one(e, out, mode, timeout) for e in entries]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def _table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_fmt(r.get(k, "")) for k in keys) + " |" for r in rows]
    return lines


_VERDICT = {True: "yes", False: "**no**", None: "n/a", "inconclusive": "inconclusive"}


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    cut = text.find(". ")
    return text if cut < 0 else text[: cut + 1]


def _by_paper(runs: Sequence[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Runs grouped by their result's ``paper`` (else their package), groups sorted by key."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        res = r["result"] or {}
        key = res.get("paper") or f"package {r['dist'] or r['name'].split('.')[0]}"
        groups.setdefault(key, []).append(r)
    return sorted(groups.items())


def render_index(runs: Sequence[dict[str, Any]], *, mode: str) -> str:
    """The markdown report: a table per paper, the run summary, then one section per experiment."""
    lines = [
        "# frontier-opt: reproduction report",
        "",
        f"Mode: `{mode}`. Made by `nox -s repro` (`python -m shared_core.experiment.repro "
        f"--{mode}`). Each section links the run folder holding its `result.json` and plots.",
        "",
    ]
    if not runs:
        lines += ["No experiments are registered (entry-point group `frontier_opt.experiments`)."]
        return "\n".join(lines) + "\n"
    lines += ["## Claims by paper", ""]
    for paper, group in _by_paper(runs):
        lines += [
            f"### {paper}",
            "",
            "| experiment | claim | rule (fixed before the run) | measured | holds |",
            "|---|---|---|---|---|",
        ]
        for r in group:
            res = r["result"] or {}
            measured = res.get("measured") or _first_sentence(res.get("summary", "")) or "-"
            verdict = _VERDICT.get(res.get("holds")) if res else f"- ({r['status']})"
            rule = r.get("rule") or "**not stated**"
            lines.append(
                f"| [{r['name']}](#{r['name'].replace('.', '')}) | {_fmt(res.get('claim', '-'))}"
                f" | {_fmt(rule)} | {_fmt(measured)} | {verdict} |"
            )
        lines.append("")
    lines += [
        "## Runs",
        "",
        "| experiment | package | holds | status | seconds |",
        "|---|---|---|---|---:|",
    ]
    for r in runs:
        res = r["result"] or {}
        verdict = _VERDICT.get(res.get("holds")) if res else "-"
        lines.append(
            f"| [{r['name']}](#{r['name'].replace('.', '')}) | {r['dist'] or '-'} | {verdict} | "
            f"{r['status']} | {r['seconds']:.1f} |"
        )
    total = sum(r["seconds"] for r in runs)
    lines += ["", f"Total: {total:.0f} s for {len(runs)} experiments."]
    for r in runs:
        res = r["result"]
        lines += ["", f"## {r['name']}", ""]
        if res is None:
            lines += [
                f"Status: {r['status']}. Rerun `python -m {r['module']} --{mode}` to see why."
            ]
            continue
        lines += [
            f"**{res['title']}**",
            "",
            f"*Claim:* {res['claim']}",
            "",
            f"*Rule (fixed before the run):* {r.get('rule') or 'not stated'}",
            "",
            f"*Holds:* {_VERDICT[res['holds']]}",
            "",
            res["summary"],
            "",
            f"Command: `python -m {r['module']} --{mode}`",
            "",
        ]
        lines += _table([{"metric": k, "value": v} for k, v in res["metrics"].items()])
        if res.get("table"):
            lines += ["", *_table(res["table"])]
        for png in res.get("plots", []):
            lines += ["", f"![{r['name']}: {png}]({r['name']}/{png})"]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shared_core.experiment.repro", description=__doc__)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="quick mode (the default)")
    size.add_argument("--full", action="store_true", help="paper-scale mode")
    p.add_argument("--out", type=Path, default=Path("reports/repro"))
    p.add_argument("-k", dest="select", default=None, help="only names containing this text")
    p.add_argument("--all", action="store_true", help="headline and extra experiments")
    p.add_argument("--member", default=None, help="every experiment of this package (dist name)")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per experiment")
    p.add_argument("--list", action="store_true", help="list the selected experiments and exit")
    args = p.parse_args(argv)
    mode = "full" if args.full else "quick"
    entries = discover_all() if (args.all or args.member) else discover()
    if args.member:
        entries = [e for e in entries if e.dist == args.member]
        if not entries:
            print(f"[repro] no experiment registered by {args.member!r}", file=sys.stderr)
            return 2
    if args.select:
        entries = [e for e in entries if args.select in e.name]
    if args.list:
        for e in entries:
            kind = "headline" if e.headline else "extra"
            est = quick_estimate(e.module)
            print(f"{e.name}\t{e.module}\t{e.dist}\t{kind}\t{'' if est is None else est}")
        return 0
    if mode == "quick":
        est = [quick_estimate(e.module) for e in entries]
        known = [x for x in est if x is not None]
        print(
            f"[repro] {len(entries)} experiments, quick mode: expected ~{sum(known):.0f} s "
            f"on a quiet 2-core machine ({len(est) - len(known)} without an estimate)",
            flush=True,
        )
    runs = run_all(entries, args.out, mode=mode, timeout=args.timeout)
    (args.out / "index.json").write_text(json.dumps(runs, indent=2) + "\n")
    index = args.out / "index.md"
    index.write_text(render_index(runs, mode=mode))
    failed = [r["name"] for r in runs if r["status"] != "ok"]
    print(f"[repro] wrote {index} ({len(runs)} experiments, {len(failed)} failed)")
    if failed:
        print(f"[repro] failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
