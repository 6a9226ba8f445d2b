import math

import pytest
import torch

from gp_bts.bounds import bcr_bound, beta, c1, noiseless_variance_sum
from gp_bts.info_gain import greedy_information_gain
from gp_bts.models import KernelSpec


@pytest.mark.parametrize("noise_var", [1e-4, 0.01, 1.0, 7.0])
def test_c1_inequality_on_a_fine_grid(noise_var):
    s = torch.linspace(0.0, 1.0, 2001, dtype=torch.float64)
    lhs = s
    rhs = c1(noise_var) * 0.5 * torch.log1p(s / noise_var)
    assert bool((lhs <= rhs + 1e-12).all())
    assert float(lhs[-1]) == pytest.approx(float(rhs[-1]), rel=1e-12)  # tight at s = k_max


def test_beta_makes_the_tail_term_one_over_n_squared():
    for n, card in [(10, 50), (64, 256), (1000, 7)]:
        b = beta(n, card)
        phi = math.exp(-b / 2) / math.sqrt(2 * math.pi)
        assert card * phi == pytest.approx(1 / n**2, rel=1e-12)


def test_bcr_bound_pieces():
    g, n, card, s2 = 3.0, 32, 100, 0.01
    assert bcr_bound(g, n, card, s2) == pytest.approx(1 + math.sqrt(c1(s2) * n * beta(n, card) * g))
    assert bcr_bound(g, n, card, s2, xi=4.0) == pytest.approx(
        1 + 2 * (bcr_bound(g, n, card, s2) - 1)
    )
    assert bcr_bound(g, n, card, s2, variance_sum=0.0) == 1.0


def test_noiseless_variance_sum_grows_slower_than_noisy_on_a_grid():
    grid = torch.cartesian_prod(*[torch.linspace(0, 1, 4, dtype=torch.float64)] * 2)
    k = KernelSpec("se", lengthscale=0.3).matrix(grid)

    curves = {}

    def gamma(lam, n):  # greedy is prefix-consistent: one curve per lambda serves every N
        if lam not in curves:
            curves[lam] = greedy_information_gain(k, lam, 1600)[0] / (1 - math.exp(-1))
        return float(curves[lam][n - 1])

    noisy, quiet = {}, {}
    for n in (160, 1600):
        noisy[n] = c1(1e-2) * gamma(1e-2, n)
        quiet[n], _ = noiseless_variance_sum(lambda lam, n=n: gamma(lam, n), (1e-2, 1e-4, 1e-8))
        assert quiet[n] <= noisy[n] + 1e-12  # lambda = sigma^2 is on the grid
    # well past |X| = 16 evaluations the noiseless sum grows much less than the noisy one
    # (the noisy one like |X| log N; the noiseless one is bounded as lambda -> 0)
    assert quiet[1600] < noisy[1600]
    assert quiet[1600] - quiet[160] < 0.5 * (noisy[1600] - noisy[160])


def test_bad_inputs():
    with pytest.raises(ValueError, match="n_evals"):
        beta(0, 3)
    with pytest.raises(ValueError, match="noise_var"):
        c1(-1.0)
    with pytest.raises(ValueError, match="xi"):
        bcr_bound(1.0, 4, 4, 0.1, xi=0.5)
    with pytest.raises(ValueError, match="gamma"):
        bcr_bound(float("nan"), 4, 4, 0.1)
    with pytest.raises(ValueError, match="lambda"):
        noiseless_variance_sum(lambda lam: 1.0, [0.0])
