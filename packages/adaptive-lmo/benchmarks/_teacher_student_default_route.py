"""teacher-student with the optimizer's default route instead of the experiments' exact one.

A diagnostic (the leading underscore keeps it out of ``nox -s bench``). The registered
experiments pin ``method="svd"`` (the exact family member at every a, what they were
validated with); this runs ``teacher-student`` unchanged except that every AdaptiveLMO the
experiments' factory builds takes the optimizer's default ``method="auto"`` (a = 0 steps by
torch Muon's bf16 Newton-Schulz, layers off a = 0 on the Newton-Schulz mixture where it is
accepted, the cost rule). Same rule, seeds, grids and report as the experiment.

    python packages/adaptive-lmo/benchmarks/_teacher_student_default_route.py --quick \\
        --out /tmp/ts_default_route
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


if __name__ == "__main__":
    common.AdaptiveLMO = _DefaultRoute
    sys.exit(teacher_student.main(sys.argv[1:]))
