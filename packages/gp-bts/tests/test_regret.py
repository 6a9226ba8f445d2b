import pytest
import torch

from gp_bts.regret import cumulative_regret, instant_regret, per_round, simple_regret


def test_hand_made_trace():
    # Q = 2, three rounds, f* = 5; values by hand:
    values = torch.tensor([1.0, 4.0, 2.0, 5.0, 3.0, 4.5])
    assert instant_regret(values, 5.0).tolist() == [4.0, 1.0, 3.0, 0.0, 2.0, 0.5]
    assert cumulative_regret(values, 5.0).tolist() == [4.0, 5.0, 8.0, 8.0, 10.0, 10.5]
    assert simple_regret(values, 5.0).tolist() == [4.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert per_round(cumulative_regret(values, 5.0), 2).tolist() == [5.0, 8.0, 10.5]
    assert per_round(simple_regret(values, 5.0), 3).tolist() == [1.0, 0.0]


def test_batched_over_seeds_matches_loop():
    g = torch.Generator().manual_seed(3)
    values = -torch.rand(4, 7, generator=g, dtype=torch.float64)
    opt = torch.zeros(4, dtype=torch.float64)
    cr, sr = cumulative_regret(values, opt), simple_regret(values, opt)
    for s in range(4):
        run = 0.0
        for i in range(7):
            run += -float(values[s, i])
            assert cr[s, i].item() == pytest.approx(run, abs=1e-15)
            assert sr[s, i].item() == pytest.approx(-float(values[s, : i + 1].max()), abs=0)


def test_bad_inputs():
    with pytest.raises(ValueError, match="NaN"):
        simple_regret(torch.tensor([1.0, float("nan")]), 2.0)
    with pytest.raises(ValueError, match="exceeds the optimum"):
        cumulative_regret(torch.tensor([1.0, 3.0]), 2.0)
    with pytest.raises(ValueError, match="finite"):
        cumulative_regret(torch.tensor([1.0]), float("inf"))
    with pytest.raises(ValueError, match="whole rounds"):
        per_round(torch.arange(5.0), 2)
    with pytest.raises(ValueError, match="batch_size"):
        per_round(torch.arange(4.0), 0)
    with pytest.raises(ValueError, match="at least one"):
        simple_regret(torch.tensor([]), 0.0)
