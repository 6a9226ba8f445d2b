r"""noiseless-matern: ``noiseless`` on a Matérn-5/2 prior, its own gamma_N in the bounds.

Setting: exactly ``noiseless``'s (16 x 16 grid of :math:`[0,1]^2`, the true prior known,
:math:`Q = 4`, noise sd 0.1 vs exact observations with the fixed jitter, paired by seed) with
the prior :math:`f \sim GP(0, k_{\nu=5/2})`, lengthscale 0.15, output scale 1
(``_common.MATERN_PRIOR``); the computed bounds use the Matérn :math:`\gamma_N(\lambda)`.

Rule (fixed before the first run, the same as ``noiseless``'s): **holds** iff (a) the 95%
paired-bootstrap interval of :math:`R_N(\text{noisy}) - R_N(\text{noiseless})` at the full
budget lies above 0 and (b) the measured noiseless growth exponent is below the noisy one.

Sizes: quick :math:`N = 64`, 20 seeds; default :math:`N = 256`, 30 seeds.
"""

from __future__ import annotations

from shared_core.experiment import ExperimentResult, RunContext, run_experiment

from . import _common as cm
from .noiseless import noiseless

#: Quick-mode wall seconds on a 2-core CPU (as noiseless's, x1.5); `nox -s repro` plans with it.
QUICK_SECONDS = 21


def run(ctx: RunContext) -> ExperimentResult:
    return noiseless(ctx, cm.MATERN_PRIOR)


def main(argv=None):
    return run_experiment(run, name="gp-bts.noiseless-matern", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
