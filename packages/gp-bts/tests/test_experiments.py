import json

import pytest
import torch

from gp_bts.experiments import _common as cm
from gp_bts.experiments.noiseless import _slope


def test_bootstrap_of_a_paired_mean_difference():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(400, generator=g, dtype=torch.float64) + 1.0
    b = a - 0.5 + 0.01 * torch.randn(400, generator=g, dtype=torch.float64)
    point, lo, hi = cm.bootstrap(lambda x: (x[:, 0] - x[:, 1]).mean(), torch.stack([a, b], 1))
    assert point == pytest.approx(float((a - b).mean()))
    # paired: the interval is as narrow as the pair noise (sd 0.01 / sqrt(400)), not the
    # per-seed spread (sd 1)
    assert lo < point < hi and hi - lo < 0.01
    assert lo < 0.5 < hi


def test_slope_of_a_power_law():
    ns = [16, 32, 64, 128]
    ys = torch.tensor([3.0 * n**0.4 for n in ns], dtype=torch.float64)
    assert _slope(ns, ys) == pytest.approx(0.4, abs=1e-12)


def test_bounds_grow_with_the_batch_factor():
    b1, b16 = cm.bounds_for(32, 1, 0.01), cm.bounds_for(32, 16, 0.01)
    assert b1["bound_noQ"] == pytest.approx(b1["bound_withQ"])
    assert b16["bound_withQ"] > 10 * b16["bound_noQ"]


def test_matern_gamma_certifies_the_matern_grid():
    # the Matern bounds use the Matern Gram matrix: its certified gamma_N is at least the
    # information of any N-point multiset of the grid under that kernel (gamma_N is their
    # max), checked on random multisets and on the SE greedy picks, which are not optimal here
    from gp_bts.info_gain import greedy_information_gain, information_gain

    n, noise_var = 24, 0.01
    grid = cm.objective(0, cm.MATERN_PRIOR).candidates
    km = cm.MATERN_PRIOR.matrix(grid)
    g_m = cm.prior_gamma(n, noise_var, cm.MATERN_PRIOR)
    gen = torch.Generator().manual_seed(0)
    sets = [torch.randint(len(grid), (n,), generator=gen) for _ in range(10)]
    sets.append(greedy_information_gain(cm.PRIOR.matrix(grid), noise_var, n)[1])
    for a in sets:
        assert information_gain(km[a][:, a], noise_var) <= g_m
    assert g_m != cm.prior_gamma(n, noise_var)  # the prior argument is not ignored
    b = cm.bounds_for(n, 16, noise_var, cm.MATERN_PRIOR)
    assert b["gamma"] == g_m and b["bound_withQ"] > b["bound_noQ"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "warmup",
        "noiseless",
        "batch_scaling",
        "batch_scaling_matern",
        "warmup_matern",
        "noiseless_matern",
        "benchmarks",
    ],
)
def test_quick_experiment_writes_a_verdict(name, tmp_path):
    import importlib

    mod = importlib.import_module(f"gp_bts.experiments.{name}")
    assert mod.main(["--quick", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "result.json").read_text())
    assert res["paper"] == "P06" and isinstance(res["holds"], bool)
    assert all((tmp_path / p).is_file() for p in res["plots"])
