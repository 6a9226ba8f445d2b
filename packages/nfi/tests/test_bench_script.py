"""The benchmark script's statistics (interval, verdict) and its Monitor timing design."""

import importlib.util
import random
import statistics
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_stable_ce.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("nfi_bench_stable_ce", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bootstrap_interval_covers_the_true_median_at_about_its_level(bench):
    # Monte-Carlo coverage: lognormal ratios with true median exp(0.03); the percentile
    # bootstrap of a median from n = 41 under-covers a little, so the band is wide but a
    # broken interval (a point, or the wrong quantiles) lands far outside it.
    rng = random.Random(7)
    true, trials, hits = 1.03, 150, 0
    for t in range(trials):
        xs = [true * rng.lognormvariate(0, 0.1) for _ in range(41)]
        lo, hi = bench.bootstrap_median_ci(xs, draws=400, seed=t)
        assert lo <= statistics.median(xs) <= hi
        hits += lo <= true <= hi
    assert 0.85 <= hits / trials <= 0.995


def test_bootstrap_interval_of_constant_ratios_is_that_constant(bench):
    assert bench.bootstrap_median_ci([1.25] * 9) == (1.25, 1.25)


def test_verdict_rule(bench):
    assert bench.verdict((0.98, 1.01), 1.02) == "meets"
    assert bench.verdict((1.03, 1.10), 1.02) == "misses"
    assert bench.verdict((1.00, 1.04), 1.02) == "unresolved"


def test_bad_arguments(bench):
    with pytest.raises(ValueError, match="at least 2"):
        bench.bootstrap_median_ci([1.0])
    with pytest.raises(ValueError, match="level"):
        bench.bootstrap_median_ci([1.0, 2.0], level=1.0)
    with pytest.raises(ValueError, match="multiple"):
        bench.monitor_case(every=7, seg=10, pairs=2)


def test_monitor_case_runs_and_reports_paired_cpu_time(bench):
    r = bench.monitor_case(every=5, seg=10, pairs=4, warmup=1)
    assert len(r["ratios"]) == 4 and r["ci95"][0] <= r["ratio_median"] <= r["ci95"][1]
    assert r["verdict"] in ("meets", "misses", "unresolved")
    null = bench.monitor_case(every=None, seg=10, pairs=2, warmup=0)
    assert null["name"].startswith("monitor_null")
