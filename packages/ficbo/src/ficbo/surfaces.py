"""Shipped hyperparameter surfaces of scikit-learn models (no scikit-learn needed to read them).

``ficbo/data/sklearn_grids.json`` was made by ``packages/ficbo/scripts/make_real_grids.py``
(its docstring says how): per *surface* (a model family on one of scikit-learn's bundled
datasets and one train/validation split), an 8 x 8 hyperparameter grid mapped to the unit
square, with the full-data validation score (``objective``), the validation score of a fit on
10% of the training data (``lowfi``) and that fit's in-sample training score (``heuristic``,
a deliberately biased source).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

import torch

__all__ = ["Surfaces", "load_surfaces"]

SOURCES = ("lowfi", "heuristic")


@dataclass
class Surfaces:
    """``T`` surfaces on a shared grid of ``N`` points.

    Attributes:
        x: ``(T, N, 2)`` grid points in the unit square.
        objective: ``(T, N)`` validation score of the full fit (maximised).
        feedback: ``(T, 2, N)``: ``lowfi``, ``heuristic`` (see the module docstring).
        family: model-dataset name of each surface; split: its split index.
    """

    x: torch.Tensor
    objective: torch.Tensor
    feedback: torch.Tensor
    family: list[str]
    split: list[int]

    def __len__(self) -> int:
        return self.x.shape[0]


def load_surfaces() -> Surfaces:
    """Read the shipped surfaces (float64 tensors)."""
    ref = resources.files("ficbo") / "data" / "sklearn_grids.json"
    blob = json.loads(ref.read_text())
    rows = blob["surfaces"]
    f64 = torch.float64
    return Surfaces(
        x=torch.tensor([r["x"] for r in rows], dtype=f64),
        objective=torch.tensor([r["objective"] for r in rows], dtype=f64),
        feedback=torch.tensor([[r[s] for s in SOURCES] for r in rows], dtype=f64),
        family=[r["family"] for r in rows],
        split=[int(r["split"]) for r in rows],
    )
