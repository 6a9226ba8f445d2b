"""Run every registered headline experiment and write one markdown report.

Registry: a package lists its headline experiments as entry points in the group
``frontier_opt.experiments`` (name ``<package>.<experiment>``, value the module to run with
``python -m``), in its own ``pyproject.toml``::

    [project.entry-points."frontier_opt.experiments"]
    "imuon.conditioning" = "imuon.experiments.conditioning"

so that installing a package is all it takes for ``nox -s repro`` to find it: nothing central
is edited. The runner starts each module in a fresh interpreter with ``--quick`` (or ``--full``)
and ``--out <report>/<name>``, then reads the ``result.json`` it wrote (see
:mod:`shared_core.experiment.run`).

Usage::

    python -m shared_core.experiment.repro --quick --out reports/repro
    python -m shared_core.experiment.repro --list
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from .run import RESULT_FILE

__all__ = ["GROUP", "Entry", "discover", "main", "render_index", "run_all"]

GROUP = "frontier_opt.experiments"


@dataclass(frozen=True)
class Entry:
    name: str
    module: str
    dist: str | None


def discover(group: str = GROUP) -> list[Entry]:
    """The registered experiments, sorted by name; duplicate names are an error."""
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
        found[ep.name] = Entry(ep.name, ep.value, dist)
    return [found[k] for k in sorted(found)]


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
        "status": status,
        "seconds": seconds,
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


_VERDICT = {True: "yes", False: "**no**", None: "n/a"}


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
            "| experiment | claim | measured | holds |",
            "|---|---|---|---|",
        ]
        for r in group:
            res = r["result"] or {}
            measured = res.get("measured") or _first_sentence(res.get("summary", "")) or "-"
            verdict = _VERDICT.get(res.get("holds")) if res else f"- ({r['status']})"
            lines.append(
                f"| [{r['name']}](#{r['name'].replace('.', '')}) | {_fmt(res.get('claim', '-'))}"
                f" | {_fmt(measured)} | {verdict} |"
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
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per experiment")
    p.add_argument("--list", action="store_true", help="list the registered experiments and exit")
    args = p.parse_args(argv)
    mode = "full" if args.full else "quick"
    entries = discover()
    if args.select:
        entries = [e for e in entries if args.select in e.name]
    if args.list:
        for e in entries:
            print(f"{e.name}\t{e.module}\t{e.dist}")
        return 0
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
