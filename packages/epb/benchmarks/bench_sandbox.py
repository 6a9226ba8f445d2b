"""Cost of running programs in the sandbox's worker processes instead of in this process.

Three ratios, each measured side by side in one run with ``shared_core.bench.compare``
(candidate = isolated, :func:`epb.programs.set_isolation` ``("process")``; baseline = in
process, ``"none"``, the path of every release before issue 21; median over interleaved pairs):

* ``evolve``: one EPB iteration (Block I over the TSP seed portfolio, Block II boosting and
  pruning) with the offline proposer on TSP20 states of the shipped teacher; both sides make
  exactly the same decisions, so the time ratio is the inverse of the throughput ratio in
  programs evaluated per second (every program scored on a bank counts once);
* ``batch``: 32 candidate programs (random expressions of the offline search's vocabulary)
  scored on the training bank, one call (the isolated side sends one batch to the pool);
* ``single``: the same programs one call each (one round trip per program);
* ``rollout``: the evolved portfolio's multi-start rollout (every start node) on 16 TSP20
  instances, as the experiments' evaluation does it: one call per construction step with all
  the portfolio's programs on all rows (counted: programs x steps).

Usage: ``uv run python packages/epb/benchmarks/bench_sandbox.py [--quick] --out F``.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import torch

from epb.evolve import evolve
from epb.experiments.distill import seed_portfolio, vocabulary
from epb.policy import load_teacher
from epb.portfolio import collect_states
from epb.problems import random_tsp
from epb.programs import compile_program, evaluate, isolation
from epb.proposers import OPS, Expr, ExpressionProposer, Term
from epb.rollout import multistart
from epb.sandbox import default_sandbox
from shared_core.bench import compare, markdown_table, write_json


def random_programs(k: int, seed: int = 0):
    rng = random.Random(seed)
    feats = vocabulary("tsp")
    out = []
    for _ in range(k):
        terms = [
            Term(
                rng.uniform(-2, 2),
                rng.choice(OPS),
                rng.choice(feats),
                rng.choice((None, "progress")),
            )
            for _ in range(rng.randint(1, 6))
        ]
        out.append(compile_program(Expr(terms).render()))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer states and repeats")
    ap.add_argument("--out", type=Path, default=Path("bench_sandbox.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    n_train, repeats = (16, 3) if args.quick else (40, 5)
    g = torch.Generator().manual_seed(0)
    teacher = load_teacher("tsp", 20)
    train = collect_states(teacher, random_tsp(n_train, 20, g), starts=2)
    val = collect_states(teacher, random_tsp(n_train // 2, 20, g), starts=2)
    box = default_sandbox().start()

    def run_evolve(mode: str):
        def go():
            with isolation(mode):
                torch.manual_seed(0)  # the router's initialisation: same on both sides
                train.cache.clear()
                val.cache.clear()
                prop = ExpressionProposer(seed=0, candidates=2, features=vocabulary("tsp"))
                return evolve(seed_portfolio("tsp"), train, val, prop, iterations=1)

        return go

    before = box.stats["programs"]
    port_iso, hist_iso = run_evolve("process")()
    evaluated = box.stats["programs"] - before
    _, hist_loc = run_evolve("none")()
    assert hist_iso.log == hist_loc.log, "the two paths must make the same decisions"

    progs = random_programs(32)
    port = port_iso
    inst = random_tsp(16, 20, g)

    def rollout(mode):
        def go():
            with isolation(mode):
                return multistart(port.bind, inst)

        return go

    def batch(mode):
        def go():
            with isolation(mode):
                return evaluate(progs, train.feats)

        return go

    def single(mode):
        def go():
            with isolation(mode):
                return [evaluate([p], train.feats) for p in progs]

        return go

    before = box.stats["programs"]
    rollout("process")()
    rollout_count = box.stats["programs"] - before  # programs x construction steps
    states = {"states_train": len(train), "states_val": len(val), "nodes": 20}
    results = [
        compare(
            run_evolve("process"),
            run_evolve("none"),
            name="evolve",
            warmup=1,
            repeats=repeats,
            params={**states, "programs_evaluated": evaluated, "iterations": 1},
        ),
        compare(
            batch("process"),
            batch("none"),
            name="batch",
            warmup=2,
            repeats=3 * repeats,
            params={**states, "programs": len(progs)},
        ),
        compare(
            single("process"),
            single("none"),
            name="single",
            warmup=2,
            repeats=3 * repeats,
            params={**states, "programs": len(progs)},
        ),
        compare(
            rollout("process"),
            rollout("none"),
            name="rollout",
            warmup=1,
            repeats=repeats,
            params={"instances": 16, "nodes": 20, "programs": rollout_count},
        ),
    ]
    rows = []
    for r in results:
        count = r.params.get("programs_evaluated", r.params.get("programs"))
        rows.append(
            {
                "workload": r.name,
                "programs": count,
                "isolated programs/s": round(count / r.candidate.median_s, 1),
                "in-process programs/s": round(count / r.baseline.median_s, 1),
                "throughput ratio": round(1 / r.ratio_median, 3),
                "ratio range": f"{1 / r.ratio_max:.3f}-{1 / r.ratio_min:.3f}",
            }
        )
    cmd = "uv run --locked python packages/epb/benchmarks/bench_sandbox.py" + (
        " --quick" if args.quick else ""
    )
    write_json(args.out, results, command=cmd, table=rows, workers=box.n_workers)
    print(markdown_table(results))
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
