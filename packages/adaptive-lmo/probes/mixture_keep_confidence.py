"""Probe (issue 33, not the default): the mixture keep at a lower confidence (0.84, t ~ 1).

The cost rule keeps an exponent whose resolved gain is below ``min_gain`` when the
Newton-Schulz mixture carries it (``controller._mixture_keeps``), with the gain's lower bound at
``switch_confidence`` (0.975). This patches the keep to use its own bound at 0.84 (a wrong keep
on the mixture costs ~0.27 of a Newton-Schulz step, not an SVD per step) and runs, with the rule
fixed before the runs (docs/mixture.md): the null population of ``tests/test_gain_bound.py``
(``null``), teacher-student quick on the default route (``ts``), the overhead benchmark
(``bench``). The second argument is ``current`` or ``variant``; the rest goes to the runner.

    python packages/adaptive-lmo/probes/mixture_keep_confidence.py null variant
    python packages/adaptive-lmo/probes/mixture_keep_confidence.py ts variant --quick --out /tmp/ts
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import adaptive_lmo.controller as controller

_ROOT = Path(__file__).resolve().parents[1]
CONF = 0.84


def install(conf: float = CONF) -> None:
    """The mixture keep on the gain's lower bound at ``conf`` (the SVD price keeps 0.975)."""

    def keeps(self, it, crit, a, low):
        if not self._mixable(it, crit, a):
            return False
        at = torch.tensor([a, 0.0], dtype=torch.float64)
        dec = controller.surrogate_decrease(at, crit.s, crit.curv, crit.d)
        gain = float(dec[0] / dec[1]) - 1.0
        if not gain > 0:
            return False
        low_conf = self._gain_bound(a, it, crit, gain, conf)
        if not low_conf > 0:
            return False
        _, loss = self._score_mixture(it, crit, a)
        mg = it.group.get("min_gain", 0.0)
        return loss < mg and (1.0 + low_conf) * (1.0 - loss) > 1.0

    controller.ExponentController._mixture_keeps = keeps


def null_draws(trials: int = 40) -> list[float]:
    """test_gain_bound's null population (beta = 1: a = 0 exactly best), the defaults: the
    test's own draws (``_leaves``), so the probe scores exactly what the test does."""
    sys.path.insert(0, str(_ROOT / "tests"))
    from test_gain_bound import _leaves

    return _leaves(1.0, trials)


def main(argv: list[str]) -> int:
    what, arm, rest = argv[0], argv[1], argv[2:]
    if arm == "variant":
        install()
    sys.path.insert(0, str(_ROOT / "benchmarks"))
    if what == "null":
        draws = null_draws()
        print(arm, "leaves a = 0 on", sum(a > 0 for a in draws), "of", len(draws), "draws")
        print("  exponents off 0:", [round(a, 3) for a in draws if a > 0])
        return 0
    if what == "ts":
        import _teacher_student_default_route as default_route

        import adaptive_lmo.experiments._common as common
        from adaptive_lmo.experiments import teacher_student

        common.AdaptiveLMO = default_route._DefaultRoute
        return teacher_student.main(rest)
    import bench_overhead

    return bench_overhead.main(rest)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
