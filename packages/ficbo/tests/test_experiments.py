"""Helpers of the experiments against scipy."""

import pytest
import torch
from scipy import stats

from ficbo.experiments import synthetic
from ficbo.experiments.reliability import bootstrap_spearman, spearman
from ficbo.experiments.synthetic import paired_interval


def test_spearman_matches_scipy():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(37, generator=g, dtype=torch.float64)
    b = a + 0.7 * torch.randn(37, generator=g, dtype=torch.float64)
    ref = stats.spearmanr(a.numpy(), b.numpy()).statistic
    assert spearman(a, b) == pytest.approx(ref, abs=1e-12)
    lo, hi = bootstrap_spearman(a, b, n_boot=200)
    assert lo < spearman(a, b) < hi
    with pytest.raises(ValueError, match="equal length"):
        spearman(a, b[:-1])


def test_paired_interval_covers_the_mean_and_matches_it():
    g = torch.Generator().manual_seed(1)
    d = torch.randn(50, generator=g, dtype=torch.float64) + 0.3
    mean, lo, hi = paired_interval(d, n_boot=500)
    assert mean == pytest.approx(float(d.mean()))
    # the bootstrap interval is close to mean +- 1.96 s/sqrt(n) (normal theory, n = 50)
    half = 1.96 * float(d.std()) / 50**0.5
    assert lo < mean < hi
    assert (hi - lo) == pytest.approx(2 * half, rel=0.25)


def _tiny(quick):
    return {"steps": 2, "batch": 4, "points": 12, "d_model": 16, "tasks": 6, "iters": 3}


@pytest.mark.parametrize("quick", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_synthetic_runs_end_to_end_at_tiny_size(tmp_path, monkeypatch, quick):
    monkeypatch.setattr(synthetic, "sizes", _tiny)
    ctx = synthetic.RunContext(out_dir=tmp_path, quick=quick, full=False, seed=0)
    res = synthetic.run_all(ctx)
    assert res.paper == "P04" and isinstance(res.holds, bool)
    assert all((tmp_path / p).is_file() for p in res.plots)
    for gp in synthetic.GP_METHODS:
        assert (gp in res.table[0]) is (not quick)
    # the objectives are the same in every setting: feedback-free methods score identically
    assert len({row["random"] for row in res.table}) == 1
    assert len({row["history-only"] for row in res.table}) == 1
    for row in res.table:
        for m in synthetic.METHODS:
            assert 0 <= row[m] < 10


def test_reliability_quick_runs_and_reads_the_shipped_model(tmp_path):
    from ficbo.experiments import reliability

    ctx = reliability.RunContext(out_dir=tmp_path, quick=True, full=False, seed=0)
    res = reliability.run_all(ctx)
    assert [r["history"] for r in res.table] == list(reliability.PREFIXES)
    assert all(-1 <= r["spearman"] <= 1 for r in res.table)
    assert (tmp_path / res.plots[0]).is_file()


def test_multisource_runs_end_to_end_at_tiny_size(tmp_path, monkeypatch):
    from ficbo.experiments import multisource

    monkeypatch.setattr(multisource, "sizes", _tiny)
    ctx = multisource.RunContext(out_dir=tmp_path, quick=True, full=False, seed=0)
    res = multisource.run_all(ctx)
    assert [r["method"] for r in res.table] == list(multisource.METHODS)
    assert isinstance(res.holds, bool) and (tmp_path / res.plots[0]).is_file()


def _silent_fraction(monkeypatch, dropout):
    from ficbo import model as model_mod

    seen = []
    original = model_mod.FICBOModel.predict  # what pretraining calls (forward wraps it)

    def spy(self, x_hist, y_hist, fb_hist, x_cand, fb_cand):
        seen.append(torch.cat([fb_hist, fb_cand], -1).detach().clone())
        return original(self, x_hist, y_hist, fb_hist, x_cand, fb_cand)

    monkeypatch.setattr(model_mod.FICBOModel, "predict", spy)
    cfg = model_mod.ModelConfig(max_dim=1, n_sources=2, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    model_mod.pretrain(cfg, steps=12, batch_size=32, n_points=12, seed=0, source_dropout=dropout)
    two = [fb for fb in seen if fb.shape[1] == 2]
    return float(torch.cat([torch.isnan(fb).all(-1) for fb in two]).double().mean())


def test_pretraining_with_two_sources_drops_sources_per_task(monkeypatch):
    # Over all 12 points a source is silent by the prior's access alone with probability
    # P(Bin(12, p >= 1/2) < 2) < 0.4%; per-task dropout 1/2 makes about half of them silent
    # (>= 300 task-sources: binomial sd < 0.03).
    assert _silent_fraction(monkeypatch, 0.0) < 0.05
    assert 0.35 < _silent_fraction(monkeypatch, 0.5) < 0.65


def test_scaling_tasks_put_the_informative_source_where_it_says():
    from ficbo.experiments import scaling

    g = torch.Generator().manual_seed(0)
    x, f, fb, good = scaling.make_tasks("four-sources", 200, 40, g)
    assert x.shape == (200, 40, 2) and fb.shape == (200, 4, 40)
    # the slot named informative correlates with f (rho 0.9, noise 0.1 on warped feedback);
    # the others have rho 0 or -0.3: its mean correlation is clearly the largest
    fc = f - f.mean(-1, keepdim=True)
    sc = fb - fb.mean(-1, keepdim=True)
    corr = (sc * fc[:, None]).sum(-1) / (sc.norm(dim=-1) * fc.norm(dim=-1)[:, None])
    c_good = corr.gather(1, good[:, None])[:, 0]
    assert float(c_good.mean()) > 0.6
    others = corr.sum(1) - c_good
    assert float((others / 3).mean()) < 0.1
    _, _, fb_p, good_p = scaling.make_tasks("partial-access", 200, 40, g)
    seen = ~torch.isnan(fb_p)
    frac_good = seen.gather(1, good_p[:, None, None].expand(-1, 1, 40)).double().mean()
    # 8000 Bernoulli(0.5) draws: sd 0.0056
    assert abs(float(frac_good) - 0.5) < 0.03
    assert seen.sum() - seen.gather(1, good_p[:, None, None].expand(-1, 1, 40)).sum() == 200 * 40
    x6, *_ = scaling.make_tasks("d6", 5, 30, g)
    assert x6.shape == (5, 30, 6)


def test_scaling_runs_end_to_end_at_tiny_size(tmp_path, monkeypatch):
    from ficbo.experiments import scaling

    monkeypatch.setattr(scaling, "sizes", _tiny)
    ctx = scaling.RunContext(out_dir=tmp_path, quick=True, full=False, seed=0)
    res = scaling.run_all(ctx)
    assert [r["setting"] for r in res.table] == list(scaling.SETTINGS)
    assert isinstance(res.holds, bool)
    assert len({frozenset(r) for r in res.table}) == 1  # rows share their keys
