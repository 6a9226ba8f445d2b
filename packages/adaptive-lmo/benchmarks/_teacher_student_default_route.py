"""teacher-student with the optimizer's default route instead of the experiments' exact one.

A diagnostic (the leading underscore keeps it out of ``nox -s bench``). The registered
experiments pin ``method="svd"`` (the exact family member at every a, what they were
validated with); this runs ``teacher-student`` unchanged except that every AdaptiveLMO the
experiments' factory builds takes the optimizer's default ``method="auto"`` (a = 0 steps by
torch Muon's bf16 Newton-Schulz, layers off a = 0 on the Newton-Schulz mixture where it is
accepted, the cost rule). Same rule, seeds, grids and report as the experiment.

    python packages/adaptive-lmo/benchmarks/_teacher_student_default_route.py --quick \\
        [--keep-unresolved] [--optimizer-backoff] [--fisher] [--exact-polar] \\
        --out /tmp/ts_default_route

The experiments also pin ``backoff=0`` (their fixed criterion spacing); this diagnostic keeps
that pin unless ``--optimizer-backoff`` is given, which leaves the optimizer's own default
(3): with it every AdaptiveLMO option is the constructor's default, what a user gets.
``--fisher``: AdaptiveLMO runs also call ``opt.fisher_backward(out, "mse")`` each step (the
sampled-target Fisher the README's usage shows; an extra backward on criterion steps).
``--exact-polar``: ``exact_polar=True`` (opt-in: a layer at a = 0 takes the exact polar
factor where the surrogate resolves Newton-Schulz's loss above ``min_gain``).
"""

from __future__ import annotations

import sys

import adaptive_lmo.experiments._common as common
from adaptive_lmo.experiments import teacher_student

_EXTRA: dict = {}  # options set by the flags below
_DROP: set = set()  # the experiments' pins to leave at the optimizer's default


class _DefaultRoute(common.AdaptiveLMO):
    def __init__(self, *args, **kw) -> None:
        if kw.get("method") == "svd":
            kw["method"] = "auto"
        for k in _DROP:
            kw.pop(k, None)
        super().__init__(*args, **{**kw, **_EXTRA})


def _with_fisher() -> None:
    """Every training run passes ``fisher="mse"`` to the experiments' loop (a no-op for
    optimizers other than AdaptiveLMO, and for AdaptiveLMO with a fixed exponent)."""
    loop = teacher_student.train_loop  # the name the experiment calls

    def train_loop(*args, **kw):
        kw.setdefault("fisher", "mse")
        return loop(*args, **kw)

    teacher_student.train_loop = train_loop


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
    if "--optimizer-backoff" in argv:
        argv.remove("--optimizer-backoff")
        _DROP.add("backoff")
    if "--fisher" in argv:
        argv.remove("--fisher")
        _with_fisher()
    if "--exact-polar" in argv:
        argv.remove("--exact-polar")
        _EXTRA["exact_polar"] = True
    sys.exit(teacher_student.main(argv))
