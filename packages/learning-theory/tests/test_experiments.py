"""Each headline experiment's quick path on a tiny configuration, and its registration."""

import importlib
import tomllib
from pathlib import Path

import pytest

from learning_theory.experiments import compression_bounds as cb
from learning_theory.experiments import generation_tradeoff as gt
from shared_core.experiment import RunContext


def _ctx(tmp_path: Path) -> RunContext:
    return RunContext(out_dir=tmp_path, quick=True, full=False, seed=0)


def test_compression_bounds_tiny(tmp_path):
    res = cb.run(_ctx(tmp_path), {"ms_c": [30], "ms_h": [12], "draws_c": 8, "draws_h": 4})
    assert res.holds is True  # eight draws cannot exceed a 5%-bound fraction unless it fails
    assert {r["class"] for r in res.table} >= {"halfplanes", "bipartite-halfplanes"}
    assert all(r["q95_err"] <= r["bound"] for r in res.table)
    for p in res.plots:
        assert (tmp_path / p).is_file()


def test_generation_tradeoff_tiny(tmp_path):
    res = gt.run(_ctx(tmp_path), {"T": 900, "W": 50, "P": 60})
    assert res.holds is True, res.summary
    assert res.metrics["A|Explore (1/sqrt t)|unseen_recall"] == 1.0
    for p in res.plots:
        assert (tmp_path / p).is_file()


@pytest.mark.parametrize("name", ["compression-bounds", "generation-tradeoff"])
def test_registered_as_headline_experiment(name):
    # read the declaration itself: installed metadata lags until the environment is re-synced
    meta = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    eps = meta["project"]["entry-points"]["frontier_opt.experiments"]
    mod = name.replace("-", "_")
    assert eps[f"learning-theory.{name}"] == f"learning_theory.experiments.{mod}"
    assert callable(importlib.import_module(eps[f"learning-theory.{name}"]).main)
