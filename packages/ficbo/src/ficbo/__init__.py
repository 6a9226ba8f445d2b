"""Feedback-informed in-context black-box optimisation with a pretrained transformer.

Layers: :mod:`ficbo.prior` (the structured feedback prior, pure functions) and
:mod:`ficbo.devices` (the checked device choice) ->
:mod:`ficbo.heads` (predictive distributions) -> :mod:`ficbo.model` (the transformer,
pretraining, checkpoints) -> :mod:`ficbo.optimize`
(acquisitions, policies, the loop :func:`run`) -> :mod:`ficbo.experiments`.
"""

from importlib.metadata import PackageNotFoundError, version

from .devices import resolve_device
from .model import FICBOModel, ModelConfig, feedback_sensitivity, load, pretrain, pretrained, save
from .optimize import (
    RunResult,
    blind_feedback_policy,
    expected_improvement,
    model_policy,
    random_policy,
    run,
)
from .prior import FeedbackTasks, evaluate, sample_tasks, standardize_feedback
from .surfaces import Surfaces, load_surfaces

try:
    __version__ = version("ficbo")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = [
    "FICBOModel",
    "FeedbackTasks",
    "ModelConfig",
    "RunResult",
    "Surfaces",
    "__version__",
    "blind_feedback_policy",
    "evaluate",
    "expected_improvement",
    "feedback_sensitivity",
    "load",
    "load_surfaces",
    "model_policy",
    "pretrain",
    "pretrained",
    "random_policy",
    "resolve_device",
    "run",
    "sample_tasks",
    "save",
    "standardize_feedback",
]
