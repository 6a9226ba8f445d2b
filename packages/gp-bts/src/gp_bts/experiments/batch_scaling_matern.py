r"""batch-scaling-matern: ``batch-scaling`` on a Matérn-5/2 prior, its own gamma_N in the bounds.

Setting: exactly ``batch-scaling``'s (16 x 16 grid of :math:`[0,1]^2`, noise sd 0.1, the true
prior known, :math:`Q \in \{1, 2, 4, 8, 16\}` at equal total evaluations :math:`N`, the same
objective and noise stream for every :math:`Q` of a seed) with the prior
:math:`f \sim GP(0, k_{\nu=5/2})`, lengthscale 0.15, output scale 1 (``_common.MATERN_PRIOR``).
The Matérn draws are rougher than the SE ones and the kernel's eigenvalues decay
polynomially, so :math:`\gamma_N` (greedy information gain on the Matérn Gram matrix of the
grid, certified upper end) and hence both computed bounds are larger; the plot shows them
against the measured cumulative regret.

Rule (fixed before the first run, the same as ``batch-scaling``'s): the claim "no
multiplicative factor in :math:`Q`" **holds** iff the upper end of the 95% paired-bootstrap
interval (over seeds) of :math:`R_N(16)/R_N(1)` at the full budget :math:`N` is at most 2.

Sizes: quick :math:`N = 48`, 20 seeds; default :math:`N = 128`, 30 seeds.
"""

from __future__ import annotations

from shared_core.experiment import ExperimentResult, RunContext, run_experiment

from . import _common as cm
from .batch_scaling import scaling

#: Quick-mode wall seconds on a 2-core CPU (measured like batch-scaling's, x1.5);
#: `nox -s repro` plans its budget with it.
QUICK_SECONDS = 31


def run(ctx: RunContext) -> ExperimentResult:
    return scaling(ctx, cm.MATERN_PRIOR)


def main(argv=None):
    return run_experiment(run, name="gp-bts.batch-scaling-matern", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
