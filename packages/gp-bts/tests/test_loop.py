import math
import warnings

import pytest
import torch

import gp_bts
from gp_bts import KernelSpec, gp_prior_objective, run

warnings.filterwarnings("ignore", message=".*not p.d.*")


@pytest.fixture(scope="module")
def prior():
    return gp_prior_objective(0, dim=1, grid_size=25, kernel=KernelSpec("se", lengthscale=0.2))


def test_trace_shapes_and_accounting(prior):
    tr = run(prior, batch_size=3, rounds=4, policy="bts", noise=0.1, seed=2)
    assert tr.X.shape == (12, 1) and tr.values.shape == (12,)
    assert tr.round_index.tolist() == [r for r in range(1, 5) for _ in range(3)]
    assert torch.equal(tr.values, prior(tr.X))
    inst = prior.optimum - tr.values
    assert torch.allclose(tr.cumulative_regret, inst.cumsum(0))
    assert tr.simple_regret[-1].item() == pytest.approx(prior.optimum - float(tr.values.max()))
    assert torch.isfinite(tr.sigma).all() and len(tr.round_seconds) == 4
    # the noise stream depends only on the seed
    again = run(prior, batch_size=3, rounds=4, policy="bts", noise=0.1, seed=2)
    assert torch.equal(again.X, tr.X) and torch.equal(again.observations, tr.observations)


def test_q1_run_is_botorch_sequential_ts(prior):
    """run(policy='bts', Q=1) queries what BoTorch's MaxPosteriorSampling picks each round."""
    from botorch.generation.sampling import MaxPosteriorSampling

    from gp_bts.models import build_model
    from gp_bts.policy import prior_thompson_batch

    tr = run(prior, batch_size=1, rounds=6, policy="bts", noise=0.05, seed=4)
    noise_gen = torch.Generator().manual_seed(10_007 * 4 + 1)
    xs, ys = [], []
    with torch.random.fork_rng():
        torch.manual_seed(4)
        for r in range(6):
            if r == 0:
                idx, _ = prior_thompson_batch(prior.kernel.matrix(prior.candidates), 1)
                x = prior.candidates[idx]
            else:
                m = build_model(
                    torch.cat(xs),
                    torch.cat(ys)[:, None],
                    bounds=prior.bounds,
                    noise_var=0.0025,
                    kernel=prior.kernel,
                )
                x = MaxPosteriorSampling(m, replacement=True)(prior.candidates, num_samples=1)
            f = prior(x)
            (
                xs.append(x),
                ys.append(f + 0.05 * torch.randn(1, generator=noise_gen, dtype=torch.float64)),
            )
    assert torch.equal(torch.cat(xs), tr.X)


def test_warmup_phase_labels(prior):
    tr = run(prior, batch_size=2, rounds=3, policy="bts-us", us_rounds=2, noise=0.1, seed=0)
    assert tr.phase == ["us"] * 4 + ["policy"] * 2
    # the first US pick is a maximum-prior-variance point, and the US batch does not repeat
    assert tr.X[0].tolist() != tr.X[1].tolist()


@pytest.mark.parametrize("policy", ["qucb", "qlogei", "random"])
def test_baselines_run(prior, policy):
    tr = run(prior, batch_size=2, rounds=3, policy=policy, noise=0.1, seed=1)
    assert tr.X.shape == (6, 1) and (tr.simple_regret >= 0).all()


def test_fitted_model_on_a_continuous_box():
    f = gp_bts.branin()
    tr = run(f, batch_size=2, rounds=2, policy="bts", seed=0, n_candidates=200)
    assert tr.X.shape == (3 + 4, 2) and tr.phase[:3] == ["init"] * 3
    assert ((f.bounds[0] <= tr.X) & (f.bounds[1] >= tr.X)).all()
    assert tr.simple_regret[-1] >= 0


def test_noiseless_observations_equal_values(prior):
    tr = run(prior, batch_size=2, rounds=3, noise=0.0, seed=0)
    assert torch.equal(tr.observations, tr.values)


def test_bad_inputs(prior):
    box = torch.tensor([[0.0], [1.0]], dtype=torch.float64)

    def f(x):
        return x.sum(-1)

    with pytest.raises(ValueError, match="batch_size"):
        run(prior, batch_size=0, rounds=1)
    with pytest.raises(ValueError, match="rounds"):
        run(prior, batch_size=1, rounds=0)
    with pytest.raises(ValueError, match="low < high"):
        run(f, torch.tensor([[0.0, 1.0], [1.0, 1.0]]), batch_size=1, rounds=1, policy="random")
    with pytest.raises(ValueError, match="shape"):
        run(f, torch.tensor([0.0, 1.0]), batch_size=1, rounds=1)
    with pytest.raises(ValueError, match="policy"):
        run(prior, batch_size=1, rounds=1, policy="ei")
    with pytest.raises(ValueError, match="noise"):
        run(prior, batch_size=1, rounds=1, noise=-0.1)
    with pytest.raises(ValueError, match="NaN or inf"):
        run(lambda x: torch.full((len(x),), math.nan), box, batch_size=1, rounds=1, policy="random")
    with pytest.raises(ValueError, match="expected"):
        run(lambda x: torch.zeros(len(x), 2), box, batch_size=2, rounds=1, policy="random")
    with pytest.raises(ValueError, match="inside the bounds"):
        run(f, box, batch_size=1, rounds=1, candidates=torch.tensor([[2.0]]), policy="random")
    with pytest.raises(ValueError, match="exceeds the optimum"):
        run(f, box, batch_size=1, rounds=1, policy="random", optimum=-5.0)


def test_large_candidate_sets_switch_to_pathwise_and_subsample_for_us():
    f = gp_bts.branin()
    tr = run(f, batch_size=2, rounds=2, policy="bts-us", us_rounds=1, seed=0, n_candidates=1500)
    assert tr.phase == ["init"] * 3 + ["us"] * 2 + ["policy"] * 2
    assert torch.isfinite(tr.sigma[3:]).all() and (tr.sigma[3:] > 0).all()
