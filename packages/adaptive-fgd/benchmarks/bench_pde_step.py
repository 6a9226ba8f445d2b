"""Cost of one H^1_0 FGD step's gradient representation, per PDE representation.

On the level-7 P1 mesh (16 129 unknowns: the nearest grid above 10k points), at several states
of the `pde` experiment's adaptive local-grid Poisson run (its iterate after 2, 10 and 25 steps
by default: early, middle and late, where the rules settle on different sizes; exact gradient
steps would not do, since they keep the residual's shape), each measured side by side in one
run with ``shared_core.bench.compare``:

* ``local_vs_levels``: the local hierarchical grid (exact check: one top solve with a cached LU,
  then :func:`~adaptive_fgd.pde_local.refine_local`) vs whole levels with the hierarchical
  estimate (the level the adaptive rule settles on, its Galerkin projection and the estimate's
  level-``l+1`` projection, factorisations cached);
* ``local_vs_exact``: the local grid vs the exact top-level gradient alone (one cached solve).

Usage: ``uv run python packages/adaptive-fgd/benchmarks/bench_pde_step.py [--quick]
[--states 2,10,25] --out F``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import scipy.sparse.linalg as spla

from adaptive_fgd.experiments.pde import U_BOUND, make_source
from adaptive_fgd.pde import PoissonHierarchy, hierarchical_error, projected_gradient
from adaptive_fgd.pde_local import HierarchicalGrid, local_pde_fgd, refine_local
from shared_core.bench import compare, markdown_table, write_json

DELTA = 0.3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--out", type=Path, default=Path("bench_pde_step.json"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--states", default="2,10,25", help="steps of the adaptive run before each state"
    )
    args = ap.parse_args(argv)
    repeats = 5 if args.quick else 15
    states = sorted({int(v) for v in args.states.split(",")})
    if not states or states[0] < 0:
        raise SystemExit(f"--states needs non-negative step counts, got {args.states!r}")
    hier = PoissonHierarchy(7, make_source(False))
    lu = spla.splu(hier.A.tocsc())
    results = []
    for steps in states:  # the adaptive local-grid run of the experiment, delta = 0.3
        u, _ = local_pde_fgd(hier, steps, delta=DELTA, u_bound=U_BOUND, start_level=2)
        results += measure(hier, lu, hier.residual(u), steps, repeats, args.threads)
    write_json(
        args.out,
        results,
        command="python packages/adaptive-fgd/benchmarks/bench_pde_step.py"
        + (" --quick" if args.quick else "")
        + f" --states {args.states}",
    )
    print(markdown_table(results))
    return 0


def measure(hier, lu, r, steps: int, repeats: int, threads: int) -> list:
    """The two comparisons at the state whose residual is ``r`` (after ``steps`` steps)."""
    grid = HierarchicalGrid(hier)
    floor = grid.initial(2)
    # the sizes the rules settle on at this state (found once, outside the timing)
    _, _, _, k, _ = refine_local(grid, lu.solve(r), DELTA, int(floor.sum()), floor)
    level = 2
    while hierarchical_error(hier, level, r) > DELTA and level < hier.top:
        level += 1
    for lev in (level, min(level + 1, hier.top)):
        hier.factor(lev)  # cached, as inside a run

    def local_step():
        return refine_local(grid, lu.solve(r), DELTA, k, floor)[1]

    def level_step():
        hierarchical_error(hier, level, r)
        return projected_gradient(hier, level, r)[0]

    def exact_step():
        return lu.solve(r)

    params = {
        "unknowns": hier.A.shape[0],
        "run_steps_before": steps,
        "local_k": k,
        "level": level,
        "threads": threads,
    }
    return [
        compare(
            local_step,
            level_step,
            name=f"pde_step_local_vs_levels_L7_state{steps}",
            warmup=1,
            repeats=repeats,
            threads=threads,
            params=params,
        ),
        compare(
            local_step,
            exact_step,
            name=f"pde_step_local_vs_exact_L7_state{steps}",
            warmup=1,
            repeats=repeats,
            threads=threads,
            params=params,
        ),
    ]


if __name__ == "__main__":
    raise SystemExit(main())
