"""Implicit exploration (estimator="ix"): hand-computed rounds, the exact bias of the estimates
under the query scheme (by enumerating its query sets), the IX exponential-moment inequality,
and Monte-Carlo checks of the high-probability bound."""

import itertools
import math

import pytest
import torch

from gdro_fsq.optim import GDROFSQ, fsq_bound_hp_ix, ix_cost_estimates, ix_grid
from gdro_fsq.oracle import gdro_optimum, make_grouped_logistic
from gdro_fsq.sampling import max_weight_sum, systematic_sample


def water_fill(q, r):
    """An independent allocation: bisection on c for sum_i min(1, c q_i) = r."""
    lo, hi = 0.0, 1e12
    for _ in range(400):
        mid = (lo + hi) / 2
        if float(torch.clamp(mid * q, max=1).sum()) < r:
            lo = mid
        else:
            hi = mid
    return torch.clamp(hi * q, max=1)


def systematic_distribution(pi):
    """The exact distribution of the sets that ``systematic_sample`` draws: every permutation
    (uniform) and every interval of ``u`` on which the chosen set is constant."""
    m, r = pi.numel(), round(float(pi.sum()))
    dist = {}
    perms = list(itertools.permutations(range(m)))
    for perm in perms:
        cum = pi[list(perm)].cumsum(0)
        cum = cum * (r / float(cum[-1]))
        cuts = sorted({0.0, 1.0} | {float(c) % 1.0 for c in cum})
        for a, b in itertools.pairwise(cuts):
            if b - a <= 0:
                continue
            u = (a + b) / 2
            chosen = []
            for k in range(r):
                pos = int(torch.searchsorted(cum, torch.tensor(u + k), right=True).clamp(max=m - 1))
                chosen.append(perm[pos])
            key = tuple(sorted(chosen))
            dist[key] = dist.get(key, 0.0) + (b - a) / len(perms)
    return dist


class _Fixed:
    """A loss that ignores the parameters' values: group i's sample loss is Bernoulli(p_i)."""

    def __init__(self, p, gen):
        self.p, self.gen = p, gen

    def sample(self, groups):
        return (torch.rand(groups.numel(), generator=self.gen) < self.p[groups]).double()


def _bandit_run(p, r, rounds, seed):
    """The ix optimiser on fixed Bernoulli losses (costs 1 - p_i in mean); returns the per-group
    deviation sum_j (c_hat_{j,i} - C_i) and the optimiser."""
    m = p.numel()
    gen = torch.Generator().manual_seed(seed)
    w = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = GDROFSQ([w], lambda a, b: b, m, lr_theta=1.0, estimator="ix", generator=gen)
    src = _Fixed(p, gen)
    for _ in range(rounds):
        query = opt.plan(r)
        losses = src.sample(query.groups)
        opt.step(lambda losses=losses: losses + 0 * w.sum())
    dev = opt.game["est_sum"] - rounds * (1 - p)
    return dev, opt


def test_bad_estimator_is_refused():
    w = torch.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="estimator"):
        GDROFSQ([w], lambda a, b: b, 3, lr_theta=1.0, estimator="exp3")


@pytest.mark.parametrize("seed", [0, 1])
def test_hand_computed_rounds(seed):
    """Every round of a mixed schedule recomputed by hand: q, the marginals (independent
    water-filling), gamma, the estimates and the tracked sums of the ix bound."""
    m = 5
    prob = make_grouped_logistic(m, 3, 20, radius=2.0, seed=seed + 4)
    gen = torch.Generator().manual_seed(seed)
    w = torch.zeros(prob.dim, dtype=torch.float64, requires_grad=True)
    opt = GDROFSQ(
        [w],
        prob.loss_fn,
        m,
        radius=prob.radius,
        grad_bound=prob.grad_bound,
        estimator="ix",
        generator=gen,
    )
    sampler = prob.sampler(gen)
    cum = torch.zeros(m, dtype=torch.float64)
    V, A, beta, gmin, full, K, kmax = 0.0, 0.0, 0.0, math.inf, 0, 0.0, 0.0
    for r in [2, 1, 5, 3, 2, 4, 5, 1, 2]:
        V += m / r
        eta = math.sqrt(math.log(m) / V)
        e = torch.exp(-eta * (cum - cum.min()))
        q = e / e.sum()
        gamma = eta / 2 if r < m else 0.0
        query = opt.plan(r)
        torch.testing.assert_close(opt.q, q, rtol=1e-12, atol=1e-14)
        pi = water_fill(q, r)
        torch.testing.assert_close(query.pi, pi, rtol=1e-9, atol=1e-12)
        assert opt.round_weights.gamma == pytest.approx(gamma, rel=1e-12)
        batch = sampler.sample(query.groups)
        losses = opt.step(lambda b=batch: prob.loss_fn([w], b)).double()
        est = torch.zeros(m, dtype=torch.float64)
        for k, i in enumerate(query.groups.tolist()):
            est[i] = (1 - float(losses[k])) / (float(pi[i]) + gamma)  # losses in [0, 1]
        cum += est
        A += eta / 2 * float((q * est**2).sum())
        beta += gamma * float((q / (pi + gamma)).sum())
        if gamma > 0:
            gmin = min(gmin, gamma)
        else:
            full += 1
        kappa = max_weight_sum(q, pi, r)
        K, kmax = K + kappa**2, max(kmax, kappa)
        torch.testing.assert_close(opt.game["est_sum"], cum, rtol=1e-9, atol=1e-12)
    assert opt.game["second_moment_sum"] == pytest.approx(A, rel=1e-9)
    assert opt.game["bias_sum"] == pytest.approx(beta, rel=1e-9)
    assert opt.game["gamma_min"] == pytest.approx(gmin, rel=1e-12)
    assert opt.game["full_rounds"] == full == 2
    assert opt.game["kappa_sq_sum"] == pytest.approx(K, rel=1e-9)
    # no explicit exploration: kappa <= 2 (README, "Why the variance is m/r", gamma = 0)
    assert kmax <= 2 + 1e-12
    assert opt.bound_hp(0.01) > opt.bound_hp(0.2) > 0
    assert math.isfinite(opt.bound())


def test_first_round_by_hand():
    """m = 3, r = 1, one loss of 0.3 (B = 1): q uniform, pi = 1/3, gamma = eta/2."""
    w = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    gen = torch.Generator().manual_seed(0)
    opt = GDROFSQ([w], lambda a, b: b, 3, lr_theta=1.0, estimator="ix", generator=gen)
    query = opt.plan(1)
    eta = math.sqrt(math.log(3) / 3)
    torch.testing.assert_close(query.pi, torch.full((3,), 1 / 3, dtype=torch.float64))
    opt.step(lambda: torch.tensor([0.3], dtype=torch.float64) + 0 * w.sum())
    i = int(query.groups[0])
    expected = torch.zeros(3, dtype=torch.float64)
    expected[i] = 0.7 / (1 / 3 + eta / 2)
    torch.testing.assert_close(opt.game["est_sum"], expected, rtol=1e-12, atol=0)
    # the next q puts less weight on the group whose cost was observed
    opt.plan(1)
    eta2 = math.sqrt(math.log(3) / 6)
    e = torch.exp(-eta2 * expected)
    torch.testing.assert_close(opt.q, e / e.sum(), rtol=1e-12, atol=0)


@pytest.mark.parametrize(("m", "r", "seed"), [(4, 2, 0), (5, 2, 1), (5, 3, 2), (4, 1, 3)])
def test_bias_is_optimistic_exactly_and_by_monte_carlo(m, r, seed):
    """Enumerate the query sets of the systematic sampler: the exact mean of the IX cost
    estimate is c_i pi_i/(pi_i + gamma) <= c_i (an underestimate of the costs: optimistic for
    the minimising player); a Monte-Carlo mean agrees; and the one-round bias of <q, c_hat> is
    at most gamma sum_i q_i/(pi_i + gamma)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.softmax(2 * torch.randn(m, generator=gen, dtype=torch.float64), 0)
    pi = water_fill(q, r)
    c = torch.rand(m, generator=gen, dtype=torch.float64) * 0.8 + 0.2
    gamma = 0.15
    dist = systematic_distribution(pi)
    assert sum(dist.values()) == pytest.approx(1.0, abs=1e-12)
    incl = torch.zeros(m, dtype=torch.float64)
    exact = torch.zeros(m, dtype=torch.float64)
    for s, prob in dist.items():
        idx = torch.tensor(s)
        est = ix_cost_estimates(1 - c[idx], idx, pi[idx], m, gamma)
        exact += prob * est
        incl[idx] += prob
    torch.testing.assert_close(incl, pi, rtol=1e-9, atol=1e-12)  # the sampler's marginals
    torch.testing.assert_close(exact, c * pi / (pi + gamma), rtol=1e-9, atol=1e-12)
    assert bool((exact < c).all())  # strictly optimistic for gamma > 0
    # unbiased at gamma = 0
    unb = sum(
        p * ix_cost_estimates(1 - c[torch.tensor(s)], torch.tensor(s), pi[list(s)], m, 0.0)
        for s, p in dist.items()
    )
    torch.testing.assert_close(unb, c, rtol=1e-9, atol=1e-12)
    bias = float((q * c).sum() - (q * exact).sum())
    assert 0 < bias <= gamma * float((q / (pi + gamma)).sum()) + 1e-12
    # Monte Carlo with the sampler itself
    n = 10000
    mc = torch.zeros(m, dtype=torch.float64)
    mc_sq = torch.zeros(m, dtype=torch.float64)
    for _ in range(n):
        s = systematic_sample(pi, gen)
        est = ix_cost_estimates(1 - c[s], s, pi[s], m, gamma)
        mc += est
        mc_sq += est**2
    mean = mc / n
    se = ((mc_sq / n - mean**2).clamp(min=0) / n).sqrt()
    assert bool(((mean - exact).abs() <= 4.5 * se + 1e-12).all())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ix_exponential_moment_inequality_exactly(seed):
    """The one-round inequality behind the IX bound, on the enumerated sets and Bernoulli
    sample costs: E exp(lambda c_hat_i) <= exp(lambda C_i) for every lambda <= 2 gamma."""
    m, r = 5, 2
    gen = torch.Generator().manual_seed(seed)
    q = torch.softmax(3 * torch.randn(m, generator=gen, dtype=torch.float64), 0)
    pi = water_fill(q, r)
    C = torch.rand(m, generator=gen, dtype=torch.float64)
    gamma = 0.2
    dist = systematic_distribution(pi)
    for lam in (0.05, 0.2, 2 * gamma):
        for i in range(m):
            p_in = sum(p for s, p in dist.items() if i in s)
            # sample cost c in {0, 1} with mean C_i, independent of the set
            mgf = (1 - p_in) + p_in * (C[i] * math.exp(lam / (pi[i] + gamma)) + 1 - C[i])
            assert float(mgf) <= math.exp(lam * float(C[i])) * (1 + 1e-12)


def test_bound_formula_against_direct_evaluation():
    kw = dict(
        kappa_sq_sum=50.0,
        noise_sq_sum=120.0,
        reg_radius=2.0,
        radius=1.0,
        grad_bound=0.5,
        lr_theta=2.0,
        loss_bound=1.5,
        eta_q=0.2,
        second_moment_sum=7.0,
        bias_sum=3.0,
        gamma_min=0.03,
        full_rounds=11,
    )
    delta, t, m = 0.05, 40, 3
    theta = 4 * math.sqrt(50) / 4 + 2 * 0.25 * math.sqrt(50)
    noise = math.sqrt(240) * (math.sqrt(math.log(4 / delta)) + math.sqrt(math.log(8 / delta)))
    big = math.log(4 * m * 240 / delta)
    # continuous minimum over lambda in (0, 2 gamma_min]; the grid is at most a factor 2^{1/4}
    # below the best admissible lambda, so the grid value is at most 2^{1/4} times larger
    lam = torch.linspace(1e-6, 0.06, 200001, dtype=torch.float64)
    cont = float((lam * 11 / 8 + big / lam).min())
    rest = math.log(m) / 0.2 + 7.0 + 3.0 + math.sqrt(0.5 * 50 * math.log(4 / delta))
    got = fsq_bound_hp_ix(t, delta, m, **kw)
    lo = (theta + noise + 1.5 * (rest + cont)) / t
    hi = (theta + noise + 1.5 * (rest + 2**0.25 * cont)) / t
    assert lo - 1e-12 <= got <= hi
    assert min(ix_grid()) < 1e-15 and max(ix_grid()) == 1.0


def test_full_information_matches_the_default():
    """At r = m the ix and the default estimators play the same q and theta (gamma = 0, and
    softmax(-eta sum(1 - l)) = softmax(eta sum l)) when the default's constant is half of
    ix's: the default's variance proxy at r = m is 1/4 (centred gains), ix's is 1, so
    c sqrt(log m / (t/4)) = 2c sqrt(log m / t); m = 5 keeps eta <= 1 after round 1."""
    prob = make_grouped_logistic(5, 3, 20, radius=2.0, seed=7)
    thetas = []
    for est in ("iw", "ix"):
        gen = torch.Generator().manual_seed(3)
        w = torch.zeros(prob.dim, dtype=torch.float64, requires_grad=True)
        opt = GDROFSQ(
            [w],
            prob.loss_fn,
            5,
            radius=prob.radius,
            grad_bound=prob.grad_bound,
            estimator=est,
            lr_q=0.5 if est == "iw" else 1.0,
            q_step="bound",
            generator=gen,
        )
        sampler = prob.sampler(gen)
        qs = []
        for _ in range(30):
            opt.round(sampler, 5)
            qs.append(opt.q)
        thetas.append((w.detach().clone(), torch.stack(qs), opt.bound()))
    torch.testing.assert_close(thetas[0][0], thetas[1][0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(thetas[0][1], thetas[1][1], rtol=1e-10, atol=1e-12)


def test_deviation_tail_against_the_supermartingale_bound():
    """Fixed Bernoulli losses, m = 5, r = 2, 120 rounds, 60 seeds: for one fixed grid lambda
    below 2 gamma_min, the per-group underestimation sum_j (c_hat - C) exceeds log(1/d)/lambda
    in at most a d fraction of the (seed, group) pairs (d = 0.25; Ville's inequality for the
    IX supermartingale)."""
    p = torch.tensor([0.1, 0.3, 0.5, 0.7, 0.9], dtype=torch.float64)
    d, over, total, mean_dev = 0.25, 0, 0, 0.0
    for seed in range(60):
        dev, opt = _bandit_run(p, 2, 120, seed)
        lam = max(x for x in ix_grid() if x <= 2 * opt.game["gamma_min"])
        over += int((dev > math.log(1 / d) / lam).sum())
        total += dev.numel()
        mean_dev += float(dev.mean()) / 60
    assert over / total <= d
    # the optimism shows on average: the estimated costs sum below the true ones
    assert mean_dev < 0


@pytest.mark.slow
def test_monte_carlo_failure_rate_at_most_delta():
    """Over many seeds, with the exact optimum from SLSQP, the gap exceeds the ix bound in at
    most a delta fraction of the runs (m = 5, r = 2, 150 rounds, 30 seeds, delta = 0.1); the
    per-group underestimation term is checked against its own delta/4 share."""
    prob = make_grouped_logistic(5, 4, 30, radius=3.0, noise=0.1, seed=0)
    _, value = gdro_optimum(prob)
    delta, seeds, rounds, m = 0.1, 30, 150, 5
    big = math.log(4 * m * 240 / delta)
    over, over_dev, over_q = 0, 0, 0
    for seed in range(seeds):
        gen = torch.Generator().manual_seed(seed)
        w = torch.zeros(prob.dim, dtype=torch.float64, requires_grad=True)
        opt = GDROFSQ(
            [w],
            prob.loss_fn,
            m,
            radius=prob.radius,
            grad_bound=prob.grad_bound,
            estimator="ix",
            generator=gen,
        )
        sampler = prob.sampler(gen)
        dev = torch.zeros(m, dtype=torch.float64)
        regret = torch.zeros(m, dtype=torch.float64)  # player 2's, on the true risks
        for _ in range(rounds):
            risks = prob.group_risks(w.detach())  # scaled risks, in [0, 1]
            costs = 1 - risks
            before = opt.game["est_sum"].clone()
            query = opt.plan(2)
            regret += risks - float((opt.q * risks).sum())
            batch = sampler.sample(query.groups)
            opt.step(lambda b=batch, w=w: prob.loss_fn([w], b))
            dev += opt.game["est_sum"] - before - costs
        gap = prob.max_risk(opt.averaged_params()[0]) - value
        over += gap > opt.bound_hp(delta)
        # player 2's part of the bound alone (the theta terms set to zero): its two events
        # have probability at least 1 - delta/2
        g = opt.game
        q_part = rounds * fsq_bound_hp_ix(
            rounds,
            delta,
            m,
            kappa_sq_sum=g["kappa_sq_sum"],
            noise_sq_sum=0.0,
            reg_radius=0.0,
            radius=0.0,
            grad_bound=0.0,
            lr_theta=1.0,
            loss_bound=1.0,
            eta_q=opt.round_weights.eta,
            second_moment_sum=g["second_moment_sum"],
            bias_sum=g["bias_sum"],
            gamma_min=g["gamma_min"],
            full_rounds=g["full_rounds"],
        )
        over_q += float(regret.max()) > q_part
        valid = [x for x in ix_grid() if x <= 2 * opt.game["gamma_min"]]
        dev_bound = min(big / x for x in valid)
        over_dev += bool((dev > dev_bound).any())
    assert over / seeds <= delta
    assert over_dev / seeds <= delta / 4
    assert over_q / seeds <= delta / 2
