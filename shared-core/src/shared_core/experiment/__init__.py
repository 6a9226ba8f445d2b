"""Experiment plumbing: seeding, run folders, JSON results, plots, progress bars.

Example:
    >>> from shared_core.experiment import seed_everything, progress
    >>> _ = seed_everything(0)
    >>> sum(progress(range(4), disable=True))
    6
"""

from .plotting import line_plot
from .progress import progress
from .results import load_json, save_json, to_jsonable
from .run import ExperimentResult, RunContext, check_plotting, make_run_dir, run_experiment
from .seeding import seed_everything

__all__ = [
    "ExperimentResult",
    "RunContext",
    "check_plotting",
    "line_plot",
    "load_json",
    "make_run_dir",
    "progress",
    "run_experiment",
    "save_json",
    "seed_everything",
    "to_jsonable",
]
