"""Inclusion probabilities and the fixed-size sampler against hand computation and frequency."""

import pytest
import torch

from gdro_fsq.sampling import (
    capped_allocation,
    check_sample_size,
    inclusion_probabilities,
    systematic_sample,
    uniform_probabilities,
)


def test_capped_allocation_hand_case():
    # q = (0.7, 0.2, 0.1), r = 2: 2*0.7 > 1, so cap it; the rest get c = 1/0.3.
    a = capped_allocation(torch.tensor([0.7, 0.2, 0.1]), 2)
    torch.testing.assert_close(a, torch.tensor([1.0, 2 / 3, 1 / 3]))


def test_capped_allocation_uncapped_is_r_times_q():
    q = torch.tensor([0.3, 0.3, 0.2, 0.2])
    torch.testing.assert_close(capped_allocation(q, 2), 2 * q)


@pytest.mark.parametrize("r", [1, 2, 3, 5, 7])
def test_capped_allocation_sums_to_r_and_is_capped(r):
    q = torch.softmax(3 * torch.randn(7, generator=torch.Generator().manual_seed(r)), 0)
    a = capped_allocation(q, r)
    assert abs(float(a.sum()) - r) < 1e-12
    assert bool((a >= 0).all() and (a <= 1 + 1e-15).all())
    # order is kept: a larger weight never gets a smaller allocation
    order = torch.argsort(q)
    assert bool((a[order].diff() >= -1e-15).all())


def test_capped_allocation_with_underflowed_weights():
    a = capped_allocation(torch.tensor([1.0, 0.0, 0.0, 0.0]), 3)
    torch.testing.assert_close(a, torch.tensor([1.0, 2 / 3, 2 / 3, 2 / 3]))


def test_inclusion_probabilities_full_information_and_floor():
    q = torch.tensor([0.6, 0.3, 0.1])
    torch.testing.assert_close(inclusion_probabilities(q, 3, 0.4), torch.ones(3))
    pi = inclusion_probabilities(q, 1, 0.3)
    torch.testing.assert_close(pi, 0.7 * q + 0.1)
    assert bool((pi >= 0.3 * 1 / 3 - 1e-15).all())


@pytest.mark.parametrize("r", [1, 2, 4])
def test_systematic_sample_size_distinct_and_marginals(r):
    q = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05])
    pi = inclusion_probabilities(q, r, 0.2)
    gen = torch.Generator().manual_seed(0)
    n = 20000
    counts = torch.zeros(5)
    for _ in range(n):
        s = systematic_sample(pi, gen)
        assert s.numel() == r and s.unique().numel() == r
        counts[s] += 1
    freq = counts / n
    sd = torch.sqrt(pi * (1 - pi) / n)
    assert bool(((freq - pi).abs() <= 5 * sd + 1e-12).all()), (freq, pi)


def test_systematic_sample_refuses_bad_probabilities():
    with pytest.raises(ValueError, match="integer sum"):
        systematic_sample(torch.tensor([0.5, 0.6]))
    with pytest.raises(ValueError, match="<= 1"):
        systematic_sample(torch.tensor([1.5, 0.5]))


def test_uniform_probabilities():
    torch.testing.assert_close(uniform_probabilities(4, 2), torch.full((4,), 0.5))


@pytest.mark.parametrize("bad", [0, 6, -1, 1.5, True, "2", None])
def test_check_sample_size_refuses(bad):
    with pytest.raises(ValueError, match="r_t"):
        check_sample_size(bad, 5)


def test_check_sample_size_accepts_index_types():
    assert check_sample_size(torch.tensor(3), 5) == 3


try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is in the test group
    given = None

if given is not None:

    @settings(max_examples=60, deadline=None)
    @given(
        st.lists(st.floats(0.0, 10.0), min_size=2, max_size=12).filter(lambda v: sum(v) > 0),
        st.data(),
    )
    def test_inclusion_probabilities_property(weights, data):
        q = torch.tensor(weights) / sum(weights)
        m = q.numel()
        r = data.draw(st.integers(1, m))
        gamma = data.draw(st.floats(0.0, 1.0))
        pi = inclusion_probabilities(q, r, gamma)
        assert abs(float(pi.sum()) - r) < 1e-9
        assert bool((pi >= gamma * r / m - 1e-12).all() and (pi <= 1 + 1e-12).all())
        s = systematic_sample(pi, torch.Generator().manual_seed(0))
        assert s.numel() == r and s.unique().numel() == r


# ---- the variance facts the step sizes rest on (README, "Why the variance is m/r")


def _random_q(m, gen):
    """A weight vector from very peaked to nearly uniform (some entries may underflow)."""
    scale = float(torch.empty(()).uniform_(0, 12, generator=gen))
    return torch.softmax(scale * torch.randn(m, generator=gen, dtype=torch.float64), 0)


def test_second_moment_proxy_is_at_most_m_over_r_and_tight_at_uniform():
    from gdro_fsq.sampling import second_moment_proxy

    gen = torch.Generator().manual_seed(11)
    worst = 0.0
    for _ in range(400):
        m = int(torch.randint(2, 23, (), generator=gen))
        r = int(torch.randint(1, m + 1, (), generator=gen))
        gamma = float(torch.rand((), generator=gen, dtype=torch.float64))
        q = _random_q(m, gen)
        pi = inclusion_probabilities(q, r, gamma)
        s = second_moment_proxy(q, pi)
        worst = max(worst, s / (m / r))
        assert s <= m / r * (1 + 1e-12), (m, r, gamma, q)
    assert worst > 0.9  # the bound is nearly attained on some draws
    for m, r in ((7, 3), (13, 1), (9, 9)):
        q = torch.full((m,), 1 / m, dtype=torch.float64)
        s = second_moment_proxy(q, inclusion_probabilities(q, r, 0.3))
        assert s == pytest.approx(m / r, rel=1e-12)


def test_max_weight_sum_bounds_by_brute_force():
    import itertools

    from gdro_fsq.sampling import max_weight_sum

    gen = torch.Generator().manual_seed(12)
    for _ in range(150):
        m = int(torch.randint(2, 9, (), generator=gen))
        r = int(torch.randint(1, m + 1, (), generator=gen))
        gamma = 0.5 * float(torch.rand((), generator=gen, dtype=torch.float64))
        q = _random_q(m, gen)
        pi = inclusion_probabilities(q, r, gamma)
        kappa = max_weight_sum(q, pi, r)
        brute = max(
            sum(float(q[i] / pi[i]) for i in S) for S in itertools.combinations(range(m), r)
        )
        assert kappa == pytest.approx(brute, rel=1e-12)
        assert 1 - 1e-12 <= kappa <= 2 / (1 - gamma) + 1e-12
        if r == m:
            assert kappa == pytest.approx(1.0, rel=1e-12)


def test_weighted_loss_estimate_unbiased_and_second_moment_by_monte_carlo():
    from gdro_fsq.optim import importance_weighted_losses
    from gdro_fsq.sampling import second_moment_proxy

    gen = torch.Generator().manual_seed(13)
    m, r, gamma = 7, 3, 0.15
    q = _random_q(m, gen)
    c = torch.rand(m, generator=gen, dtype=torch.float64)
    pi = inclusion_probabilities(q, r, gamma)
    n = 40000
    mean, second = torch.zeros(m, dtype=torch.float64), 0.0
    for _ in range(n):
        S = systematic_sample(pi, gen)
        est = importance_weighted_losses(c[S], S, pi[S], m)
        mean += est / n
        second += float((q * est**2).sum()) / n
    exact_second = float((q * c**2 / pi).sum())
    torch.testing.assert_close(mean, c, atol=4 * float((c**2 / pi).max().sqrt()) / n**0.5, rtol=0)
    assert second == pytest.approx(exact_second, rel=0.05)
    assert exact_second <= second_moment_proxy(q, pi) <= m / r
