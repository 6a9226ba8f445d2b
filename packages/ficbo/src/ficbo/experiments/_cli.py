"""The experiments' command line: the suite's standard flags plus ``--device``.

``python -m ficbo.experiments.<name> [--quick|--full] [--seed S] [--out DIR] [--device DEV]``.
The device is checked before anything is computed, so a GPU request on a machine without one
fails at once with the reason (:func:`ficbo.devices.resolve_device`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from shared_core.experiment import ExperimentResult, RunContext, run_experiment

from ..devices import resolve_device

DEVICE_HELP = (
    "--device DEV: where the transformer is pretrained and evaluated: cpu (default), cuda, "
    "cuda:<n>. The prior, the optimisation loop and the GP baselines stay on the CPU."
)


def main_with_device(
    run_all: Callable[..., ExperimentResult],
    *,
    name: str,
    description: str | None,
    argv: Sequence[str] | None = None,
) -> int:
    """Parse ``--device``, check it, and hand the rest of ``argv`` to ``run_experiment``."""
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--device", default=None)
    opts, rest = extra.parse_known_args(argv)
    device = resolve_device(opts.device)

    def run(ctx: RunContext) -> ExperimentResult:
        return run_all(ctx, device=device)

    doc = f"{description or ''}\n\n{DEVICE_HELP}"
    return run_experiment(run, name=name, description=doc, argv=rest)
