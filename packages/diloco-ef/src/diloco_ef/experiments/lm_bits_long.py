r"""lm-bits with longer runs: the same benchmark at 2048 inner steps per worker instead of 1024.

Everything else is :mod:`diloco_ef.experiments.lm_bits`: the task, the two equal tuning grids
(six DDP configurations, six DiLoCo-EF configurations), selection on validation loss, the
verdict on test loss, the bit accounting. Only the horizon changes: DDP takes 2048 steps, and
DiLoCo-EF twice as many rounds at the same H (T = 32 at H = 64, 64 at H = 32), with the inner
step from the same rule :math:`\eta_l = c/(H\sqrt T)`, which therefore shrinks by
:math:`\sqrt 2`. Quick mode: the pilot seeds 0-2 (on which the grid was checked before this
run, see the package README); full mode: seeds 3-8.

**Holds** when the selected DiLoCo-EF configuration's seed-mean test loss is at most
``1 + LOSS_TOL`` (2%) times the selected DDP configuration's, while it sends at least
``BYTES_FACTOR`` (500) times fewer bytes (the rule of ``lm_bits``).
"""

from __future__ import annotations

from shared_core.experiment import ExperimentResult, RunContext, run_experiment

from .lm_bits import LONG_FULL, LONG_QUICK, run_config


def run(ctx: RunContext) -> ExperimentResult:
    return run_config(LONG_FULL if ctx.full else LONG_QUICK, ctx)


def main(argv: list[str] | None = None) -> int:
    return run_experiment(run, name="diloco-ef.lm-bits-long", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
