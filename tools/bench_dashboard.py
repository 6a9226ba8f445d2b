"""The performance dashboard: every speed claim, its baseline, its ratio, its machine, its goal.

    python tools/bench_dashboard.py                      # table from the committed evidence
    python tools/bench_dashboard.py --fresh reports/bench  # prefer fresh `nox -s bench` JSON
    python tools/bench_dashboard.py --write-readme       # replace the table in README.md

Each member lists its performance claims in ``benchmarks/claims.toml``::

    [[claim]]
    what = "msign Newton-Schulz vs torch.optim.Muon's, 4096x4096, float32"
    script = "speed_polar"                 # benchmarks/<script>.py (its fresh JSON, if any)
    evidence = "benchmarks/results/speed_polar_cpu_float32_ns_quiet.json"  # committed JSON
    case = "ns_4096x4096"                  # the result's "name" in that JSON
    baseline = "torch.optim.Muon's Newton-Schulz (5 steps)"
    goal = "<= 1.05"                       # on ratio = candidate time / baseline time
    command = "uv run python shared-core/benchmarks/speed_polar.py --no-svd"

``evidence`` may also be a path from the repository root (``/reports/gpu/...``); a GPU pass's
JSON nests its benchmark files, and the case is found at any depth. The machine column comes
from the ``environment`` record beside the result (CPU model, threads; or the GPU). A claim
whose evidence is missing shows as "no evidence": the dashboard never invents a number.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workspace import ROOT, library_members

START, END = "<!-- bench-dashboard:start -->", "<!-- bench-dashboard:end -->"
_GOAL = re.compile(r"^\s*(<=|>=|<|>)\s*([0-9.eE+-]+)\s*$")


@dataclass(frozen=True)
class Claim:
    member: str
    what: str
    case: str
    baseline: str
    goal: str
    evidence: Path
    script: str | None = None
    command: str = ""


def load_claims(root: Path = ROOT) -> list[Claim]:
    """Every member's ``benchmarks/claims.toml`` entries, members in workspace order."""
    out = []
    for m in library_members(root):
        path = root / m.path / "benchmarks" / "claims.toml"
        if not path.is_file():
            continue
        for i, c in enumerate(tomllib.loads(path.read_text()).get("claim", [])):
            missing = {"what", "case", "baseline", "goal", "evidence"} - set(c)
            if missing:
                raise ValueError(f"{path}: claim {i} lacks {sorted(missing)}")
            parse_goal(c["goal"])  # refuse a goal the dashboard cannot judge
            ev = c["evidence"]
            evidence = root / ev.lstrip("/") if ev.startswith("/") else root / m.path / ev
            out.append(
                Claim(
                    m.dist, c["what"], c["case"], c["baseline"], c["goal"], evidence,
                    c.get("script"), c.get("command", ""),
                )
            )  # fmt: skip
    return out


def parse_goal(goal: str) -> tuple[str, float]:
    m = _GOAL.match(goal)
    if not m:
        raise ValueError(f"a goal reads like '<= 1.10' or '>= 0.5', got {goal!r}")
    return m.group(1), float(m.group(2))


def meets(ratio: float, goal: str) -> bool:
    op, bound = parse_goal(goal)
    return {"<=": ratio <= bound, ">=": ratio >= bound, "<": ratio < bound, ">": ratio > bound}[op]


def find_case(doc: Any, case: str, env: dict | None = None) -> tuple[dict, dict | None] | None:
    """The result dict named ``case`` (with a ``ratio_median``) anywhere in ``doc``, and the
    nearest ``environment`` record above it."""
    if isinstance(doc, dict):
        env = doc.get("environment", env) if isinstance(doc.get("environment"), dict) else env
        if doc.get("name") == case and "ratio_median" in doc:
            return doc, env
        items = doc.values()
    elif isinstance(doc, list):
        items = doc
    else:
        return None
    for v in items:
        hit = find_case(v, case, env)
        if hit:
            return hit
    return None


def machine(env: dict | None) -> str:
    """One line: the GPU, or the CPU model with its thread count and BLAS."""
    if not env:
        return "not recorded"
    if env.get("gpu"):
        return str(env["gpu"])
    cpu = env.get("cpu")
    model = cpu.get("model") if isinstance(cpu, dict) else env.get("processor", "?")
    blas = env.get("blas", {}).get("blas") if isinstance(env.get("blas"), dict) else None
    threads = env.get("torch_threads")
    return f"{model}, {threads} threads" + (f", {blas}" if blas else "")


def row(claim: Claim, fresh: Path | None) -> dict[str, str]:
    source = claim.evidence
    if fresh is not None and claim.script:
        candidate = fresh / claim.member / f"{claim.script}.json"
        if candidate.is_file():
            source = candidate
    hit = None
    if source.is_file():
        hit = find_case(json.loads(source.read_text()), claim.case)
    rel = source.relative_to(ROOT).as_posix() if ROOT in source.parents else str(source)
    if hit is None:
        ratio, verdict, where = "no evidence", "-", "-"
    else:
        result, env = hit
        r = float(result["ratio_median"])
        lo, hi = result.get("ratio_min"), result.get("ratio_max")
        spread = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
        ratio, where = f"{r:.3f}{spread}", machine(env)
        verdict = "meets" if meets(r, claim.goal) else "**misses**"
    return {
        "member": claim.member,
        "claim": claim.what,
        "baseline": claim.baseline,
        "ratio (ours / baseline time)": ratio,
        "goal": claim.goal,
        "verdict": verdict,
        "machine": where,
        "evidence": f"`{rel}`",
    }


def table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "No performance claims are registered (benchmarks/claims.toml)."
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        lines.append("| " + " | ".join(str(r[k]).replace("|", "\\|") for k in keys) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--fresh", type=Path, default=None, help="folder of fresh `nox -s bench` JSON")
    ap.add_argument("--write-readme", action="store_true", help="replace the README's table")
    ap.add_argument("--out", type=Path, default=None, help="also write the table to this file")
    args = ap.parse_args(argv)
    text = table([row(c, args.fresh) for c in load_claims()])
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.write_readme:
        readme = ROOT / "README.md"
        body = readme.read_text()
        if START not in body or END not in body:
            print(f"README.md has no {START} ... {END} markers", file=sys.stderr)
            return 2
        head, rest = body.split(START, 1)
        _, tail = rest.split(END, 1)
        readme.write_text(f"{head}{START}\n{text}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
