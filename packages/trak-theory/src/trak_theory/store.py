"""Features on disk: numpy memmaps in a folder, written block by block, resumable.

Layout of ``folder``::

    meta.json                 n, k, p, block size, projector and parameter signature
    model_<id>/features.npy   (n, k) float32 memmap
    model_<id>/weights.npy    (n,) float32 memmap: the reweighting q_i = 1 - p_i
    model_<id>/done.npy       (n_blocks,) uint8 memmap: 1 once a block is written and flushed
    model_<id>/checkpoint.txt the fingerprint of the checkpoint the features come from

A block's flag is set only after its features and weights are flushed, so a run killed at any
point resumes by recomputing only blocks whose flag is 0. Opening a folder whose ``meta.json``
disagrees with the requested configuration (the training data's fingerprint included) raises
``ValueError`` instead of mixing features; features of another checkpoint are recomputed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap

__all__ = ["FeatureStore", "MemoryStore"]


class MemoryStore:
    """The in-memory twin of :class:`FeatureStore` (same interface, nothing persisted)."""

    def __init__(self, n: int, k: int, block_size: int):
        if n < 1:
            raise ValueError(f"cannot featurise an empty dataset (n={n})")
        self.n, self.k, self.block_size = n, k, block_size
        self.n_blocks = math.ceil(n / block_size)
        self._models: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._checkpoints: dict[int, str] = {}

    def arrays(self, model_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(features, weights, done) of one model, created on first use."""
        if model_id not in self._models:
            self._models[model_id] = (
                np.zeros((self.n, self.k), np.float32),
                np.zeros(self.n, np.float32),
                np.zeros(self.n_blocks, np.uint8),
            )
        return self._models[model_id]

    def model_ids(self) -> list[int]:
        return sorted(self._models)

    def checkpoint_of(self, model_id: int) -> str | None:
        """Fingerprint of the checkpoint model ``model_id``'s features come from (or None)."""
        return self._checkpoints.get(model_id)

    def set_checkpoint(self, model_id: int, fingerprint: str) -> None:
        self._checkpoints[model_id] = fingerprint

    def flush(self, model_id: int) -> None:
        """Nothing to flush in memory."""


class FeatureStore(MemoryStore):
    """Memmapped features in ``folder`` (created if missing, validated if present).

    Example:
        >>> import tempfile
        >>> st = FeatureStore(tempfile.mkdtemp(), n=10, k=4, block_size=3, meta={"p": 7})
        >>> st.arrays(0)[0].shape, st.n_blocks
        ((10, 4), 4)
    """

    def __init__(self, folder, n: int, k: int, block_size: int, meta: dict):
        super().__init__(n, k, block_size)
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        want = {"n": n, "k": k, "block_size": block_size, **meta}
        want = json.loads(json.dumps(want))  # normalise tuples and the like
        path = self.folder / "meta.json"
        if path.exists():
            have = json.loads(path.read_text())
            diff = {key: (have.get(key), val) for key, val in want.items() if have.get(key) != val}
            if diff:
                raise ValueError(
                    f"{self.folder} holds features of another configuration "
                    f"(saved vs requested: {diff}); use a fresh folder"
                )
        else:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(want, indent=1, sort_keys=True))
            tmp.replace(path)
        self.meta = want

    def _dir(self, model_id: int) -> Path:
        return self.folder / f"model_{int(model_id)}"

    def arrays(self, model_id: int):
        if model_id in self._models:
            return self._models[model_id]
        d = self._dir(model_id)
        d.mkdir(exist_ok=True)
        shapes = {
            "features": ((self.n, self.k), np.float32),
            "weights": ((self.n,), np.float32),
            "done": ((self.n_blocks,), np.uint8),
        }
        out = []
        for name, (shape, dtype) in shapes.items():
            f = d / f"{name}.npy"
            if f.exists():
                arr = open_memmap(f, mode="r+")
                if arr.shape != shape or arr.dtype != dtype:
                    raise ValueError(f"{f} has shape {arr.shape}/{arr.dtype}, expected {shape}")
            else:
                arr = open_memmap(f, mode="w+", dtype=dtype, shape=shape)
            out.append(arr)
        self._models[model_id] = tuple(out)
        return self._models[model_id]

    def model_ids(self) -> list[int]:
        ids = {int(p.name.split("_", 1)[1]) for p in self.folder.glob("model_*") if p.is_dir()}
        return sorted(ids | set(self._models))

    def flush(self, model_id: int) -> None:
        for arr in self.arrays(model_id)[:2]:
            arr.flush()

    def checkpoint_of(self, model_id: int) -> str | None:
        f = self._dir(model_id) / "checkpoint.txt"
        return f.read_text().strip() if f.is_file() else None

    def set_checkpoint(self, model_id: int, fingerprint: str) -> None:
        d = self._dir(model_id)
        d.mkdir(exist_ok=True)
        tmp = d / "checkpoint.tmp"
        tmp.write_text(fingerprint + "\n")
        tmp.replace(d / "checkpoint.txt")
