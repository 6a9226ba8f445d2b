"""The experiments' rule helpers on synthetic traces (the runs themselves are `slow`)."""

import math

import pytest

from nfi.experiments import growth_rate, no_spike, slingshot


def test_window_ratios_recover_a_known_exponential():
    T, r = 1000, 2e-3
    tr = {
        "w": [math.exp(r * t) for t in range(T)],
        "h": [2 * math.exp(r * t) for t in range(T)],
        "cos": [-1.0] * T,
        "absorbed": [1.0] * T,
        "pred": [r] * T,
    }
    rows = growth_rate.window_ratios(tr)
    assert len(rows) == (T - growth_rate.WINDOW) // growth_rate.WINDOW
    for row in rows:
        assert row["ratio_w"] == pytest.approx(1.0, rel=1e-9)
        assert row["ratio_h"] == pytest.approx(1.0, rel=1e-9)
    tr["cos"] = [0.5] * T  # not on the growing mode: no window counts
    assert growth_rate.window_ratios(tr) == []


def test_has_spike():
    flat = [1.0, 0.5, 0.4, 0.39, 0.38, 0.38, 0.37]
    assert not no_spike.has_spike(flat, 2)
    assert no_spike.has_spike([*flat, 0.6], 2)


def _arm(losses, w, absorbed, every=10):
    steps = list(range(0, len(losses), every))
    return {
        "losses": losses,
        "history": {
            "step": steps,
            "absorbed_frac": [absorbed(s) for s in steps],
            "w_mean_norm": [w(s) for s in steps],
        },
        "first_alarm": None,
    }


def test_slingshot_rule_on_synthetic_arms():
    T = 400
    ce_loss = [1e-8 if 100 <= t < 300 else (1.0 if t < 100 else 1e-3) for t in range(T)]
    ce = _arm(
        ce_loss, lambda s: 1.0 if s < 120 else math.exp((s - 120) / 40), lambda s: float(s >= 110)
    )
    st = _arm([1.0 if t < 100 else 1e-8 for t in range(T)], lambda s: 1.0, lambda s: 0.0)
    stats = {
        "ce-fp32": slingshot.analyse(ce),
        "stable-fp32": slingshot.analyse(st),
        "ce-fp64": slingshot.analyse(st),
    }
    assert stats["ce-fp32"]["t_spike"] == 300 and stats["ce-fp32"]["onset"] == 110
    assert stats["ce-fp32"]["growth"] >= 3
    gaps = {"ce-fp32": 16.7, "ce-fp64": math.inf}
    holds, clauses = slingshot.verdict(stats, gaps)
    assert holds and all(clauses.values())
    # a gap below the necessary bound breaks clause 4
    holds, clauses = slingshot.verdict(stats, {"ce-fp32": 15.0, "ce-fp64": math.inf})
    assert not holds and not clauses["gap_bound"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["slingshot", "growth_rate", "no_spike"])
def test_quick_experiment_holds(name, tmp_path):
    import importlib
    import json

    mod = importlib.import_module(f"nfi.experiments.{name}")
    assert mod.main(["--quick", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "result.json").read_text())["holds"] is True
