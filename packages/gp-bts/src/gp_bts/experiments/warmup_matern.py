r"""warmup-matern: ``warmup`` on a Matérn-5/2 prior.

Setting: exactly ``warmup``'s (16 x 16 grid of :math:`[0,1]^2`, noise sd 0.1, the true prior
known, :math:`Q = 8`, BTS with and without ``US_ROUNDS`` = 2 rounds of uncertainty sampling
first, paired by seed) with the prior :math:`f \sim GP(0, k_{\nu=5/2})`, lengthscale 0.15,
output scale 1 (``_common.MATERN_PRIOR``): rougher draws, so more to explore.

Rule (fixed before the first run, the same as ``warmup``'s): **holds** iff (a) the 95%
paired-bootstrap interval of :math:`R_N(\text{US}) - R_N(\text{no US})` lies above 0 and
(b) the upper end of the interval of :math:`S_N(\text{no US}) - S_N(\text{US})` is at most 0.05.

Sizes: quick :math:`N = 64`, 20 seeds; default :math:`N = 128`, 30 seeds.
"""

from __future__ import annotations

from shared_core.experiment import ExperimentResult, RunContext, run_experiment

from . import _common as cm
from .warmup import warmup

#: Quick-mode wall seconds on a 2-core CPU (as warmup's, x1.5); `nox -s repro` plans with it.
QUICK_SECONDS = 17


def run(ctx: RunContext) -> ExperimentResult:
    return warmup(ctx, cm.MATERN_PRIOR)


def main(argv=None):
    return run_experiment(run, name="gp-bts.warmup-matern", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
