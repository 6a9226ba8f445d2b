import itertools
import math

import pytest
import torch

from gp_bts.bounds import c1
from gp_bts.info_gain import (
    GREEDY_FACTOR,
    gamma_upper,
    greedy_information_gain,
    information_gain,
    linear_kernel_gamma,
    variance_ratio_bound,
)
from gp_bts.models import KernelSpec

# float64 log-determinants of matrices of condition <= 1 + T/sigma^2 ~ 1e3: errors ~ 1e-13.
TOL = 1e-10


def _linear_candidates(d: int, extra: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(extra, d, generator=g, dtype=torch.float64)
    z = (
        z
        / z.norm(dim=1, keepdim=True)
        * 0.9
        * torch.rand(extra, 1, generator=g, dtype=torch.float64)
    )
    return torch.cat([torch.eye(d, dtype=torch.float64), z])


@pytest.mark.parametrize(("d", "steps", "noise_var"), [(3, 6, 0.1), (5, 15, 0.01), (2, 8, 1.0)])
def test_greedy_equals_closed_form_linear_kernel(d, steps, noise_var):
    x = _linear_candidates(d, 17, d)
    gains, picks = greedy_information_gain(x @ x.T, noise_var, steps)
    assert gains[-1].item() == pytest.approx(linear_kernel_gamma(d, steps, noise_var), abs=TOL)
    # greedy takes each basis vector T/d times
    assert sorted(picks.tolist()) == sorted(list(range(d)) * (steps // d))


def test_linear_closed_form_is_an_upper_bound_off_multiples():
    x = _linear_candidates(3, 11, 0)
    for steps in (1, 2, 4, 5, 7):
        g, _ = greedy_information_gain(x @ x.T, 0.1, steps)
        balanced = [steps // 3 + (j < steps % 3) for j in range(3)]
        exact = 0.5 * sum(math.log1p(n / 0.1) for n in balanced)
        assert g[-1].item() == pytest.approx(exact, abs=TOL)
        assert g[-1].item() <= linear_kernel_gamma(3, steps, 0.1) + TOL


def test_greedy_chain_rule_equals_log_det_of_picks():
    """Two routes: the greedy's summed one-step gains and log det of the picks' Gram matrix."""
    grid = torch.rand(23, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    k = KernelSpec("matern52", lengthscale=0.3).matrix(grid)
    gains, picks = greedy_information_gain(k, 0.05, 9)
    for t in range(1, 10):
        a = picks[:t]
        assert gains[t - 1].item() == pytest.approx(information_gain(k[a][:, a], 0.05), abs=TOL)


def test_greedy_within_submodular_factor_of_brute_force():
    grid = torch.rand(6, 1, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    k = KernelSpec("se", lengthscale=0.4).matrix(grid)
    for steps in (1, 2, 3, 4):
        best = max(
            information_gain(k[list(a)][:, list(a)], 0.1)
            for a in itertools.combinations_with_replacement(range(6), steps)
        )
        g, _ = greedy_information_gain(k, 0.1, steps)
        assert GREEDY_FACTOR * best - TOL <= g[-1].item() <= best + TOL
        assert gamma_upper(g)[-1].item() >= best - TOL


def test_variance_sum_lemma_on_any_sequence():
    """sum_t sigma^2_{t-1}(x_t) <= C1 * I(A) for an arbitrary (random) query sequence."""
    g = torch.Generator().manual_seed(4)
    grid = torch.rand(31, 2, generator=g, dtype=torch.float64)
    k = KernelSpec("se", lengthscale=0.25).matrix(grid)
    for noise_var in (1e-3, 0.05, 1.0):
        seq = torch.randint(31, (40,), generator=g)
        cov, total = k.clone(), 0.0
        for j in seq.tolist():
            v = float(cov[j, j])
            total += v
            col = cov[:, j].clone()
            cov -= torch.outer(col, col) / (v + noise_var)
        gain = information_gain(k[seq][:, seq], noise_var)
        assert total <= c1(noise_var) * gain + TOL


@pytest.mark.parametrize("noise_var", [0.01, 0.2])
def test_variance_ratio_bound_holds_inside_a_batch(noise_var):
    g = torch.Generator().manual_seed(5)
    grid = torch.rand(40, 2, generator=g, dtype=torch.float64)
    k = KernelSpec("se", lengthscale=0.3).matrix(grid)
    gam, _ = greedy_information_gain(k, noise_var, 7)
    for q in (2, 4, 8):
        for _ in range(5):
            batch = torch.randint(40, (q - 1,), generator=g)
            kb = k[batch][:, batch] + noise_var * torch.eye(q - 1, dtype=torch.float64)
            post = k.diagonal() - (k[:, batch] @ torch.linalg.solve(kb, k[batch])).diagonal()
            ratio = float((k.diagonal() / post).max())
            assert ratio <= variance_ratio_bound(q, noise_var) * (1 + 1e-9)
            gamma_qm1 = float(gamma_upper(gam)[q - 2])
            assert ratio <= variance_ratio_bound(q, noise_var, gamma_qm1=gamma_qm1) * (1 + 1e-9)


def test_bad_inputs():
    with pytest.raises(ValueError, match="noise_var"):
        greedy_information_gain(torch.eye(2), 0.0, 1)
    with pytest.raises(ValueError, match="steps"):
        greedy_information_gain(torch.eye(2), 1.0, 0)
    with pytest.raises(ValueError, match="symmetric"):
        information_gain(torch.tensor([[1.0, 0.5], [0.0, 1.0]]), 1.0)
    with pytest.raises(ValueError, match="NaN"):
        information_gain(torch.tensor([[float("nan")]]), 1.0)
    with pytest.raises(ValueError, match="batch_size"):
        variance_ratio_bound(0, 0.1)
    with pytest.raises(ValueError, match="dim"):
        linear_kernel_gamma(0, 3, 0.1)
