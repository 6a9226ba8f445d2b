"""teacher-student with the optimizer's default route instead of the experiments' exact one.

A diagnostic (the leading underscore keeps it out of ``nox -s bench``). The registered
experiments pin ``method="svd"`` (the exact family member at every a, what they were
validated with); this runs ``teacher-student`` unchanged except that every AdaptiveLMO the
experiments' factory builds takes the optimizer's default ``method="auto"`` (a = 0 steps by
torch Muon's bf16 Newton-Schulz, layers off a = 0 on the Newton-Schulz mixture where it is
accepted, the cost rule). Same rule, seeds, grids and report as the experiment.

    python packages/adaptive-lmo/benchmarks/_teacher_student_default_route.py --quick \\
        [--keep-unresolved] --out /tmp/ts_default_route
"""

from __future__ import annotations

import sys

import adaptive_lmo.experiments._common as common
from adaptive_lmo.experiments import teacher_student


class _DefaultRoute(common.AdaptiveLMO):
    def __init__(self, *args, **kw) -> None:
        if kw.get("method") == "svd":
            kw["method"] = "auto"
        super().__init__(*args, **kw)


def _keep_unresolved() -> None:
    """``--keep-unresolved`` (a probe of a rule that is not the default): an accepted mixture
    stands on its point gain over a = 0, without the resolved lower bound the keep rule
    asks for (docs/mixture.md)."""
    import torch

    import adaptive_lmo.controller as controller

    def keeps(self, it, crit, a, low):
        if not self._mixable(it, crit, a):
            return False
        _, loss = self._score_mixture(it, crit, a)
        at = torch.tensor([a, 0.0], dtype=torch.float64)
        dec = controller.surrogate_decrease(at, crit.s, crit.curv, crit.d)
        gain = float(dec[0] / dec[1]) - 1.0
        return loss < it.group["min_gain"] and (1.0 + gain) * (1.0 - loss) > 1.0

    controller.ExponentController._mixture_keeps = keeps


if __name__ == "__main__":
    common.AdaptiveLMO = _DefaultRoute
    argv = sys.argv[1:]
    if "--keep-unresolved" in argv:
        argv.remove("--keep-unresolved")
        _keep_unresolved()
    sys.exit(teacher_student.main(argv))
