"""JSON that takes what experiments produce: tensors, NumPy values, paths, dataclasses."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["load_json", "save_json", "to_jsonable"]


def to_jsonable(obj: Any) -> Any:
    """Convert tensors, arrays, NumPy scalars, paths and dataclasses to plain JSON values.

    Non-finite floats become the strings ``"nan"``, ``"inf"``, ``"-inf"`` so the file stays
    standard JSON that any reader takes.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return to_jsonable(obj.detach().cpu().tolist())
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    raise ValueError(f"cannot store a {type(obj).__name__} in JSON: {obj!r:.80}")


def save_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` (see :func:`to_jsonable`) to ``path``, creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_jsonable(obj), indent=2) + "\n")
    return path


def load_json(path: str | os.PathLike[str]) -> Any:
    """Read a JSON file written by :func:`save_json`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no JSON result at {path}")
    return json.loads(path.read_text())
