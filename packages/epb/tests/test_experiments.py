"""Each experiment's quick path on a tiny configuration."""

import pytest

from epb.experiments import cvrp, tsp
from shared_core.experiment import RunContext


def tiny(quick, n=20):
    return dict(
        train_inst=4,
        train_starts=2,
        val_inst=2,
        iterations=1,
        test=6,
        candidates=1,
        pursuit=True,
        max_terms=3,
    )


def test_tsp_quick_path_on_tiny_config(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(tsp, "config", tiny)
    res = tsp.run(RunContext(out_dir=tmp_path, quick=True, full=False, seed=0))
    assert isinstance(res.holds, bool) and res.plots
    for p in res.plots:
        assert (tmp_path / p).is_file()
    m = res.metrics["tsp20"]
    assert m["gaps"]["teacher multi-start"] <= m["gaps"]["teacher greedy"] + 1e-9
    assert 0 <= m["val_agreement"] <= 1 and (tmp_path / "portfolio_tsp20.py").is_file()


def test_cvrp_quick_path_on_tiny_config(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(cvrp, "config", lambda quick: tiny(quick))
    res = cvrp.run(RunContext(out_dir=tmp_path, quick=True, full=False, seed=0))
    assert isinstance(res.holds, bool) and len(res.plots) == 2
    g = res.metrics["gaps"]
    # local search starts from each method's solution and only accepts improving moves
    for name in ("teacher greedy", "teacher multi-start", "portfolio greedy", "savings"):
        assert g[f"{name} + LS"] <= g[name] + 1e-4
    # the reference is PyVRP's (near-optimal) solution: no method beats it by more than rounding
    assert all(v >= -1e-4 for v in g.values())


@pytest.mark.parametrize("command", [pytest.param("distil", marks=pytest.mark.slow), "probe"])
def test_selection_harness_on_tiny_config(tmp_path, capsys, command):
    import json

    pytest.importorskip("elkai")
    from epb.experiments import selection

    cache = tmp_path / "sel.pt"
    args = [command, "--instances", "5", "--train-inst", "3", "--train-starts", "1"]
    args += ["--val-inst", "2", "--max-terms", "3", "--hidden", "2", "--cache", str(cache)]
    assert selection.main(args) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # LKH-3 tours are near-optimal: a construction is never shorter by more than rounding
    assert row["greedy"] >= -1e-3 and 0 <= row["val_agreement"] <= 1 and row["val_kl"] >= 0
    assert cache.is_file() and selection.selection_set(5, cache)[1].shape == (5,)
