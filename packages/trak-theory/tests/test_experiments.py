"""Each experiment's code path on a tiny configuration (the real runs are the entry points)."""

import pytest

from shared_core.experiment import RunContext
from trak_theory.experiments import _traker, lds_digits, separation


def test_separation_tiny(tmp_path):
    res = separation.run(RunContext(out_dir=tmp_path, quick=True, full=False, seed=0), p=16, m=4)
    assert isinstance(res.holds, bool)
    alo = res.metrics["n/p=4 ALO rel_error"]
    trak = res.metrics["n/p=4 TRAK (k=p, ridge=lambda) rel_error"]
    assert alo < trak  # ALO keeps the curvature and leverage that TRAK drops
    for plot in res.plots:
        assert (tmp_path / plot).exists()
    assert (tmp_path / "decomposition.json").exists()


TINY = {"n": 60, "m": 6, "subsets": 6, "ks": [8, 100], "models": [1, 2], "steps": 10}


def test_lds_digits_tiny_without_traker(tmp_path, monkeypatch):
    monkeypatch.setattr(_traker, "available", lambda: False)
    res = lds_digits.run(RunContext(out_dir=tmp_path, quick=True, full=False, seed=0), dict(TINY))
    assert res.holds is False  # no comparison made, so no claim can be judged
    assert -1 <= res.metrics["k=8 J=2 ours (auto ridge)"] <= 1
    assert (tmp_path / "lds_vs_k.png").exists()


@pytest.mark.slow
def test_lds_digits_tiny_with_traker(tmp_path):
    pytest.importorskip("trak")
    res = lds_digits.run(RunContext(out_dir=tmp_path, quick=True, full=False, seed=0), dict(TINY))
    assert res.metrics["k=8 J=2 exact-settings rel. max diff"] <= 1e-3
