"""The shipped scikit-learn surfaces and the ``real`` experiment."""

import importlib.util
import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from ficbo.experiments import real
from ficbo.surfaces import SOURCES, load_surfaces

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "make_real_grids.py"


def test_shipped_surfaces_load_on_a_shared_unit_grid():
    s = load_surfaces()
    t, n = s.objective.shape
    assert s.x.shape == (t, n, 2) and s.feedback.shape == (t, len(SOURCES), n)
    side = round(n**0.5)
    ticks = torch.linspace(0, 1, side, dtype=torch.float64)
    grid = torch.stack(torch.meshgrid(ticks, ticks, indexing="ij"), -1).reshape(-1, 2)
    assert torch.allclose(s.x, grid.expand(t, -1, -1), atol=1e-12)
    assert torch.isfinite(s.objective).all() and torch.isfinite(s.feedback).all()
    # every surface has something to optimise
    assert (s.objective.max(-1).values > s.objective.min(-1).values).all()
    assert len(set(zip(s.family, s.split, strict=True))) == t


def test_shipped_surface_is_what_the_script_computes():
    # Route 1: the JSON in the wheel; route 2: scikit-learn now, through the generating script.
    pytest.importorskip("sklearn")
    spec = importlib.util.spec_from_file_location("make_real_grids", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    blob = json.loads((resources.files("ficbo") / "data" / "sklearn_grids.json").read_text())
    shipped = next(r for r in blob["surfaces"] if r["family"] == "krr-diabetes" and r["split"] == 0)
    from threadpoolctl import threadpool_limits  # a scikit-learn dependency

    with threadpool_limits(1):  # as the script is run (OMP_NUM_THREADS=1); avoids BLAS spinning
        fresh = mod.surface("krr-diabetes", 0)
    for key in ("objective", "lowfi", "heuristic"):
        # values are stored rounded to 6 decimals; refits agree to round-off
        np.testing.assert_allclose(fresh[key], shipped[key], atol=2e-6)


def test_spearman_with_ties_matches_scipy():
    g = torch.Generator().manual_seed(0)
    a = torch.randint(0, 5, (40,), generator=g).double()  # many ties, like training scores
    b = a + torch.randn(40, generator=g, dtype=torch.float64)
    assert real.spearman_ties(a, b) == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)
    np.testing.assert_allclose(real.average_ranks(a).numpy(), stats.rankdata(a.numpy()))
    assert real.spearman_ties(torch.ones(5, dtype=torch.float64), b[:5]) == 0.0


def test_normalized_regret_by_brute_force():
    f = torch.tensor([[0.2, 0.9, 0.5, 0.1]], dtype=torch.float64)
    best = torch.tensor([[0.2, 0.5, 0.9]], dtype=torch.float64)
    assert torch.allclose(
        real.normalized_regret(best, f), torch.tensor([[0.875, 0.5, 0.0]], dtype=torch.float64)
    )


def test_real_runs_end_to_end_at_tiny_size(tmp_path, monkeypatch):
    monkeypatch.setattr(real, "sizes", lambda quick: {"starts": 1, "iters": 2})
    ctx = real.RunContext(out_dir=tmp_path, quick=True, full=False, seed=0)
    res = real.run_all(ctx)
    assert [r["method"] for r in res.table] == list(real.QUICK_METHODS)
    assert all(0 <= r["final_regret"] <= 1 for r in res.table)
    assert res.paper == "P04" and isinstance(res.holds, bool)
    assert (tmp_path / res.plots[0]).is_file()
