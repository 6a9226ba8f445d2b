"""Run folders and the one command-line contract every headline experiment follows.

An experiment module defines ``run(ctx: RunContext) -> ExperimentResult`` and ends with::

    def main(argv=None):
        return run_experiment(run, name="mypkg.myexp", description=__doc__, argv=argv)

    if __name__ == "__main__":
        raise SystemExit(main())

so that ``python -m mypkg.experiments.myexp [--quick | --full] [--seed S] [--out DIR]`` seeds
everything, makes a run folder, calls ``run``, and writes ``result.json`` there. The repro
runner (:mod:`shared_core.experiment.repro`) reads that file to build its report.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .results import save_json
from .seeding import seed_everything

__all__ = [
    "INCONCLUSIVE",
    "ExperimentResult",
    "RunContext",
    "check_plotting",
    "make_run_dir",
    "plot_extra",
    "run_experiment",
]

RESULT_FILE = "result.json"
#: the verdict of a rule whose interval straddles its margin
INCONCLUSIVE = "inconclusive"


def make_run_dir(root: str | os.PathLike[str], name: str) -> Path:
    """Create and return ``root/name/<UTC timestamp>`` (suffixed ``-1``, ``-2``, ... if taken)."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"run name must be a non-empty folder name, got {name!r}")
    base = Path(root) / name
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    path, k = base / stamp, 0
    while path.exists():
        k += 1
        path = base / f"{stamp}-{k}"
    path.mkdir(parents=True)
    return path


@dataclass
class RunContext:
    """What an experiment's ``run`` receives: where to write, and how big to be."""

    out_dir: Path
    quick: bool
    full: bool
    seed: int

    def path(self, filename: str) -> Path:
        """A file inside the run folder."""
        return self.out_dir / filename


@dataclass
class ExperimentResult:
    """What a headline experiment reports.

    Attributes:
        title: one line, e.g. "iMuon's rate does not depend on the factors' conditioning".
        claim: the source paper's claim this experiment tests, in a sentence.
        summary: markdown: what was run and what was measured, with the numbers.
        metrics: the headline numbers, flat and JSON-ready.
        holds: whether the measurement supports the claim: True, False, ``"inconclusive"``
            (the rule's interval straddles its margin: neither shown nor refuted), or None (not a
            yes/no question).
        plots: PNG file names inside the run folder.
        table: optional rows (dicts with the same keys) shown as a table in the report.
        paper: the source paper, e.g. ``"P03"`` (its id in the project's paper list); the
            report groups experiments by it.
        rule: the verdict's rule as fixed before the run, with its margin, e.g. ``"holds if the
            paired accuracy difference to Muon is >= -0.5 points (non-inferiority)"``; when
            None the report quotes the "Rule ..." paragraph of the module's docstring.
        measured: the measured result in one line, e.g. ``"slope -0.33 vs predicted -0.33"``:
            the report's per-paper table shows it beside the claim.
    """

    title: str
    claim: str
    summary: str
    metrics: dict[str, Any]
    holds: bool | str | None
    plots: list[str] = field(default_factory=list)
    table: list[dict[str, Any]] | None = None
    paper: str | None = None
    measured: str | None = None
    rule: str | None = None


def _parser(name: str, description: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {name}", description=description)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small version: minutes on 2 CPU cores")
    size.add_argument("--full", action="store_true", help="the paper-scale version")
    p.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/<name>/<time>)")
    return p


def plot_extra(experiment: str) -> str:
    """What to install for an experiment's plots, named by the experiment's own package.

    ``"imuon.image"`` -> ``"imuon[experiments]"`` when imuon's ``experiments`` extra brings
    matplotlib (directly or through ``shared-core[plot]``), else its ``plot`` extra, else the
    first extra that does; ``"matplotlib"`` when the package declares none.
    """
    top = experiment.split(".")[0]
    dists = importlib.metadata.packages_distributions().get(top) or [top.replace("_", "-")]
    for dist in dists:
        try:
            reqs = importlib.metadata.requires(dist) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        extras = []
        for req in reqs:
            m = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", req)
            if m and ("matplotlib" in req or "[plot]" in req):
                extras.append(m.group(1))
        for choice in ("experiments", "plot", *extras):
            if choice in extras:
                return f"{dist}[{choice}]"
    return "matplotlib"


def check_plotting(experiment: str) -> None:
    """Raise ``ImportError`` naming the package's own extra when matplotlib is missing.

    Called before an experiment computes anything: finding out after minutes of computing,
    with an empty run folder left behind, is the failure this prevents.
    """
    if importlib.util.find_spec("matplotlib") is None:
        raise ImportError(
            f"{experiment} draws its plots with matplotlib, which is not installed: "
            f"pip install '{plot_extra(experiment)}'"
        )


def run_experiment(
    run: Callable[[RunContext], ExperimentResult],
    *,
    name: str,
    description: str | None = None,
    argv: Sequence[str] | None = None,
    plots: bool = True,
) -> int:
    """Parse the standard flags, seed, make the run folder, run, and write ``result.json``.

    Args:
        run: the experiment, ``run(ctx) -> ExperimentResult``.
        name: ``"<package>.<experiment>"``.
        description: the ``--help`` text.
        argv: command-line arguments (``sys.argv[1:]`` when None).
        plots: the experiment draws plots; matplotlib is checked before anything runs.

    Returns:
        0, the process exit code (errors propagate as exceptions).
    """
    args = _parser(name, description).parse_args(argv)
    if plots:
        check_plotting(name)
    seed_everything(args.seed)
    out_dir = Path(args.out) if args.out is not None else make_run_dir("runs", name)
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = RunContext(out_dir=out_dir, quick=args.quick, full=args.full, seed=args.seed)
    t0 = time.perf_counter()
    result = run(ctx)
    seconds = time.perf_counter() - t0
    if not isinstance(result, ExperimentResult):
        raise TypeError(f"{name}: run() must return an ExperimentResult, got {type(result)!r}")
    if getattr(getattr(result.holds, "dtype", None), "kind", None) == "b":  # a numpy verdict
        result.holds = bool(result.holds)
    if not (result.holds is None or isinstance(result.holds, bool) or result.holds == INCONCLUSIVE):
        raise ValueError(
            f"{name}: holds must be True, False, None or {INCONCLUSIVE!r}, got {result.holds!r}"
        )
    missing = [p for p in result.plots if not (out_dir / p).is_file()]
    if missing:
        raise FileNotFoundError(f"{name}: plots listed but not written in {out_dir}: {missing}")
    mode = "quick" if args.quick else ("full" if args.full else "default")
    save_json(
        out_dir / RESULT_FILE,
        {"name": name, "mode": mode, "seed": args.seed, "seconds": seconds, **vars(result)},
    )
    verdict = {True: "holds", False: "does NOT hold", None: "n/a", INCONCLUSIVE: "inconclusive"}[
        result.holds
    ]
    print(f"{name}: {result.title} [{verdict}] ({seconds:.1f} s) -> {out_dir / RESULT_FILE}")
    return 0
