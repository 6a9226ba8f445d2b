"""The game's updates against hand computation, full information, baselines, conventions."""

import copy
import itertools
import math

import pytest
import torch

from gdro_fsq.optim import ERM, GDROFSQ, OneSampleBandit, SagawaGDRO, SMDFullInfo, fsq_bound
from gdro_fsq.oracle import make_grouped_logistic

# A toy game on a scalar parameter w: group i's per-sample loss is A[i] * w + C[i], the
# batch only says which group a row comes from.
A = torch.tensor([0.2, -0.1, 0.3], dtype=torch.float64)
C = torch.tensor([0.3, 0.5, 0.1], dtype=torch.float64)


def _toy_loss(params, batch):
    return A[batch.group] * params[0][0] + C[batch.group]


class _ToySampler:
    def sample(self, groups):
        from gdro_fsq.data import Batch

        return Batch(None, None, groups)


def _softmax(v):
    mx = max(v)
    e = [math.exp(x - mx) for x in v]
    return [x / sum(e) for x in e]


@pytest.mark.parametrize("update", ["ftrl-prox", "ftrl", "sgd"])
def test_full_information_two_rounds_by_hand(update):
    w = torch.tensor([0.5], requires_grad=True)
    c_theta, c_q = 0.4, 0.5
    opt = GDROFSQ(
        [w], _toy_loss, 3, lr_theta=c_theta, lr_q=c_q, theta_update=update, q_step="bound"
    )
    a, cc = A.tolist(), C.tolist()
    # round 1: q uniform, all groups, pi = 1, kappa = 1, K_1 = 1
    l1 = [a[i] * 0.5 + cc[i] for i in range(3)]
    got1 = opt.round(_ToySampler(), 3)
    torch.testing.assert_close(got1, torch.tensor(l1))
    g1 = sum(ai / 3 for ai in a)
    # anchored FTRL steps c / sqrt(K_1 + 16); the others start with a plain step c / sqrt(K_1)
    step1 = c_theta / math.sqrt(17) if update == "ftrl" else c_theta
    w2 = 0.5 - step1 * g1
    assert w.item() == pytest.approx(w2, abs=1e-14)
    # round 2: V_2 = 2 * 1/4 (the centred proxy at r = m),
    # eta_2 = c_q sqrt(log 3 / V_2) (below the cap 1 of r = m rounds), q_2 = softmax(eta_2 l1)
    eta2 = c_q * math.sqrt(math.log(3) / 0.5)
    assert eta2 < 1
    q2 = _softmax([eta2 * x for x in l1])
    opt.round(_ToySampler(), 3)
    torch.testing.assert_close(opt.q, torch.tensor(q2))
    g2 = sum(q2[i] * a[i] for i in range(3))
    if update == "ftrl":
        w3 = 0.5 - c_theta / math.sqrt(18) * (g1 + g2)
    elif update == "sgd":
        w3 = w2 - c_theta / math.sqrt(2) * g2
    else:  # regulariser (1/c)|w - w1|^2/2 + ((sqrt2 - 1)/c)|w - w2|^2/2, summing to sqrt2/c
        center = (0.5 + (math.sqrt(2) - 1) * w2) / math.sqrt(2)
        w3 = center - c_theta / math.sqrt(2) * (g1 + g2)
    assert w.item() == pytest.approx(w3, abs=1e-14)
    # averages: of the points where the gradients were taken
    assert opt.averaged_params()[0].item() == pytest.approx((0.5 + w2) / 2, abs=1e-14)
    torch.testing.assert_close(opt.averaged_q(), (torch.full((3,), 1 / 3) + torch.tensor(q2)) / 2)


def test_one_sample_two_rounds_by_hand():
    w = torch.tensor([0.5], requires_grad=True)
    c_theta, c_q = 0.4, 0.5
    opt = GDROFSQ(
        [w],
        _toy_loss,
        3,
        lr_theta=c_theta,
        lr_q=c_q,
        q_step="bound",
        generator=torch.Generator().manual_seed(0),
    )
    a, cc = A.tolist(), C.tolist()
    # round 1: V = 3 - 3/4, eta = min(c_q sqrt(log3/V), r/(2m) = 1/6) = 1/6, gamma = 3 eta = 1/2,
    # pi = 1/3 each
    eta1 = min(c_q * math.sqrt(math.log(3) / 2.25), 1 / 6)
    assert eta1 == 1 / 6
    q1 = opt.plan(1)
    torch.testing.assert_close(q1.pi, torch.full((3,), 1 / 3))
    j = int(q1.groups[0])
    opt.step(lambda: _toy_loss([w], _ToySampler().sample(q1.groups)))
    l1 = a[j] * 0.5 + cc[j]
    g1 = (1 / 3) / (1 / 3) * a[j]
    w2 = 0.5 - c_theta * g1  # kappa_1 = max_i q_i / pi_i = 1
    assert w.item() == pytest.approx(w2, abs=1e-14)
    est = [0.0, 0.0, 0.0]
    est[j] = l1 / (1 / 3)  # the loss is the max player's gain
    # round 2: V = 4.5, eta_2 = min(c_q sqrt(log3/4.5), 1/6), q_2 = softmax(eta_2 est),
    # gamma_2 = 3 eta_2
    eta2 = min(c_q * math.sqrt(math.log(3) / 4.5), 1 / 6)
    q2 = _softmax([eta2 * e for e in est])
    gam2 = 3 * eta2
    assert gam2 <= 0.5
    pi2 = [(1 - gam2) * q + gam2 / 3 for q in q2]  # r = 1: the allocation is q itself
    plan2 = opt.plan(1)
    torch.testing.assert_close(opt.q, torch.tensor(q2))
    torch.testing.assert_close(plan2.pi, torch.tensor(pi2))
    k = int(plan2.groups[0])
    opt.step(lambda: _toy_loss([w], _ToySampler().sample(plan2.groups)))
    g2 = q2[k] / pi2[k] * a[k]
    k2 = 1 + max(q / p for q, p in zip(q2, pi2, strict=True)) ** 2  # K_2
    sig1, sig2 = 1 / c_theta, (math.sqrt(k2) - 1) / c_theta
    w3 = (sig1 * 0.5 + sig2 * w2) / (sig1 + sig2) - c_theta / math.sqrt(k2) * (g1 + g2)
    assert w.item() == pytest.approx(w3, abs=1e-14)


def _logistic(m=4, seed=0):
    return make_grouped_logistic(m, 3, 20, seed=seed)


def test_r_equals_m_is_full_information_hedge():
    prob = _logistic()
    gen = torch.Generator().manual_seed(1)
    w = torch.zeros(3, requires_grad=True)
    opt = GDROFSQ([w], prob.loss_fn, 4, lr_theta=0.7, lr_q=0.8, q_step="bound", generator=gen)
    s = prob.sampler(gen)
    cum = torch.zeros(4)
    theta = torch.zeros(3)
    grad_sum, center_sum = torch.zeros(3), torch.zeros(3)
    for t in range(1, 16):
        eta = min(0.8 * math.sqrt(math.log(4) / (t / 4)), 1.0)  # V_t = t/4, cap 1
        q_ref = torch.softmax(eta * cum, 0)  # Hedge on the gains l / B
        plan = opt.plan(4)
        assert plan.groups.tolist() == [0, 1, 2, 3]
        torch.testing.assert_close(opt.q, q_ref)
        batch = s.sample(plan.groups)
        th = theta.clone().requires_grad_(True)
        (g,) = torch.autograd.grad((q_ref * prob.per_sample_loss(th, batch.X, batch.y)).sum(), th)
        losses = opt.step(lambda b=batch: prob.loss_fn([w], b))
        cum += losses
        grad_sum += g
        # kappa = 1, K_t = t: proximal FTRL with sigma_t = (sqrt t - sqrt(t-1)) / c
        center_sum += (math.sqrt(t) - math.sqrt(t - 1)) / 0.7 * theta
        theta = (center_sum - grad_sum) / (math.sqrt(t) / 0.7)
        torch.testing.assert_close(w.detach(), theta)
        assert opt.game["kappa_sq_sum"] == pytest.approx(t)


ALL = [
    lambda p, f, m, gen: GDROFSQ(p, f, m, lr_theta=0.5, generator=gen),
    lambda p, f, m, gen: GDROFSQ(p, f, m, lr_theta=0.5, generator=gen, theta_update="sgd"),
    lambda p, f, m, gen: GDROFSQ(p, f, m, lr_theta=0.5, generator=gen, theta_update="ftrl"),
    lambda p, f, m, gen: SagawaGDRO(p, f, m, lr_theta=0.1, lr_q=0.5, generator=gen),
    lambda p, f, m, gen: ERM(p, f, m, lr_theta=0.5, generator=gen),
]


@pytest.mark.parametrize("make", ALL)
def test_weights_stay_on_the_simplex_under_random_sizes(make):
    prob = _logistic(m=5)
    gen = torch.Generator().manual_seed(2)
    w = torch.zeros(3, requires_grad=True)
    opt = make([w], prob.loss_fn, 5, gen)
    s = prob.sampler(gen)
    for t in range(60):
        opt.round(s, 1 + t % 5)
        for q in (opt.q, opt.averaged_q()):
            assert bool((q >= 0).all())
            assert abs(float(q.sum()) - 1) < 1e-12
    assert opt.samples == sum(1 + t % 5 for t in range(60))


def test_smd_and_one_sample_baselines():
    prob = _logistic(m=4)
    gen = torch.Generator().manual_seed(3)
    s = prob.sampler(gen)
    w = torch.zeros(3, requires_grad=True)
    smd = SMDFullInfo([w], prob.loss_fn, 4, lr_theta=0.5, lr_q=1.0, generator=gen)
    losses = smd.round(s)
    # one exponentiated-gradient step on the gains from uniform
    eta = math.sqrt(math.log(4) / 1)
    torch.testing.assert_close(smd.q, torch.softmax(eta * losses, 0))
    with pytest.raises(ValueError, match="all m=4"):
        smd.plan(2)
    v = torch.zeros(3, requires_grad=True)
    one = OneSampleBandit([v], prob.loss_fn, 4, lr_theta=0.5, generator=gen)
    assert one.round(s).shape == (1,)
    with pytest.raises(ValueError, match="one sample"):
        one.plan(2)


def test_sagawa_update_by_hand():
    w = torch.tensor([0.5], requires_grad=True)
    opt = SagawaGDRO(
        [w], _toy_loss, 3, lr_theta=0.2, lr_q=0.7, generator=torch.Generator().manual_seed(4)
    )
    plan = opt.plan(2)
    torch.testing.assert_close(plan.pi, torch.full((3,), 2 / 3))
    losses = opt.step(lambda: _toy_loss([w], _ToySampler().sample(plan.groups)))
    gains = torch.zeros(3)
    gains[plan.groups] = losses
    torch.testing.assert_close(opt.q, torch.softmax(0.7 * gains, 0))
    g = sum((1 / 3) * (3 / 2) * A[i].item() for i in plan.groups.tolist())
    assert w.item() == pytest.approx(0.5 - 0.2 * g, abs=1e-14)


def _run(seed, rounds=30, make=ALL[0]):
    prob = _logistic(m=5)
    gen = torch.Generator().manual_seed(seed)
    w = torch.zeros(3, requires_grad=True)
    opt = make([w], prob.loss_fn, 5, gen)
    s = prob.sampler(gen)
    for t in range(rounds):
        opt.round(s, 1 + t % 3)
    return w.detach().clone(), opt.q, opt


def test_determinism_under_a_seed():
    w1, q1, _ = _run(7)
    w2, q2, _ = _run(7)
    _, q3, _ = _run(8)
    assert torch.equal(w1, w2) and torch.equal(q1, q2)
    assert not torch.equal(q1, q3)


def test_state_dict_round_trip_continues_identically():
    prob = _logistic(m=5)
    gen = torch.Generator().manual_seed(9)
    w = torch.zeros(3, requires_grad=True)
    opt = GDROFSQ([w], prob.loss_fn, 5, lr_theta=0.5, generator=gen)
    s = prob.sampler(gen)
    for _ in range(10):
        opt.round(s, 2)
    sd = copy.deepcopy(opt.state_dict())
    w_saved = w.detach().clone()
    for _ in range(10):
        opt.round(s, 3)
    ref_w, ref_q = w.detach().clone(), opt.q
    v = w_saved.clone().requires_grad_(True)
    gen2 = torch.Generator()
    opt2 = GDROFSQ([v], prob.loss_fn, 5, lr_theta=0.5, generator=gen2)
    opt2.load_state_dict(sd)
    s2 = prob.sampler(gen2)
    for _ in range(10):
        opt2.round(s2, 3)
    assert torch.equal(v.detach(), ref_w) and torch.equal(opt2.q, ref_q)
    assert opt2.t == 20 and opt2.samples == 50


def test_ball_constraint_holds():
    prob = _logistic(m=4)
    gen = torch.Generator().manual_seed(0)
    w = torch.full((3,), 5.0, requires_grad=True)
    opt = GDROFSQ([w], prob.loss_fn, 4, lr_theta=50.0, radius=1.0, generator=gen)
    assert float(w.detach().norm()) <= 1 + 1e-12
    s = prob.sampler(gen)
    for _ in range(10):
        opt.round(s, 2)
        assert float(w.detach().norm()) <= 1 + 1e-12


@pytest.mark.parametrize("update", ["ftrl-prox", "ftrl"])
def test_bound_decreases_with_sample_size_and_matches_formula(update):
    prob = _logistic(m=4)
    gen = torch.Generator().manual_seed(0)
    w = torch.full((3,), 0.3, requires_grad=True)
    opt = GDROFSQ(
        [w],
        prob.loss_fn,
        4,
        radius=prob.radius,
        grad_bound=prob.grad_bound,
        generator=gen,
        theta_update=update,
        q_step="bound",
    )
    s = prob.sampler(gen)
    kappas = []
    for r in (1, 2, 4):
        plan = opt.plan(r)
        ratios = sorted((opt.q / plan.pi).tolist(), reverse=True)
        kappas.append(sum(ratios[:r]))  # the largest weight sum any r-set could carry
        opt.step(lambda plan=plan: prob.loss_fn([w], s.sample(plan.groups)))
    assert kappas[-1] == pytest.approx(1.0)  # r = m
    k = sum(x * x for x in kappas)
    assert opt.game["kappa_sq_sum"] == pytest.approx(k)
    big_r = 2 * prob.radius if update == "ftrl-prox" else prob.radius + math.sqrt(3 * 0.09)
    lag = 0.0 if update == "ftrl-prox" else 16.0
    c = big_r / (math.sqrt(2) * prob.grad_bound)
    assert opt.param_groups[0]["lr_theta"] == pytest.approx(c)
    v = (4 / 1 - 0.75) + (4 / 2 - 0.75) + (4 / 4 - 0.75)  # the centred proxies m/r - 3/4
    theta = big_r**2 * math.sqrt(k + lag) / (2 * c) + c * prob.grad_bound**2 * math.sqrt(k)
    # q part: (1/c_q + 2 c_q) sqrt(V log m) + log m / cap, cap = min(1/8, 2/8, 1) = 1/8
    expect = 2 * (theta + 3 * math.sqrt(v * math.log(4)) + 8 * math.log(4)) / 3
    assert opt.bound() == pytest.approx(expect)
    kw = {"kappa_sq_sum": 50.0, "reg_radius": 2.0, "grad_bound": 1.0, "lr_theta": 0.3, "lr_q": 1}
    assert fsq_bound(50, 50 * 10.0, 10, **kw) > fsq_bound(50, 50 * 2.0, 10, **kw)


@pytest.mark.parametrize("theta_step", ["kappa", "observed"])
def test_proximal_ftrl_iterate_is_the_constrained_argmin(theta_step):
    """Each iterate against an independent solve of the FTRL problem on the ball (SLSQP).

    ``theta_step="observed"``: the regularisers' weights come from the realised gradient norms,
    ``K_t = sum_j |c_j g_j|^2 / G^2`` (README, "Observed gradient step"), recomputed here from
    an independent autograd evaluation at the iterate."""
    np = pytest.importorskip("numpy")
    minimize = pytest.importorskip("scipy.optimize").minimize
    prob = make_grouped_logistic(5, 4, 25, radius=1.3, seed=3)
    gen = torch.Generator().manual_seed(4)
    w = torch.tensor([1.0, -0.4, 0.5, 0.2], requires_grad=True)
    c = 6.0
    opt = GDROFSQ(
        [w],
        prob.loss_fn,
        5,
        lr_theta=c,
        radius=prob.radius,
        generator=gen,
        grad_bound=prob.grad_bound,
        theta_step=theta_step,
    )
    s = prob.sampler(gen)
    iterates, grads, kappas = [w.detach().clone()], [], []
    for t in range(1, 13):
        r = 1 + (3 * t) % 5
        plan = opt.plan(r)
        # the round weight c_t (README, "Round weights"): 1 unless r is below the step's cap
        cw = opt.round_weights.c
        assert cw == pytest.approx(min(1.0, r / (2 * 5) / opt.round_weights.eta), rel=1e-12)
        batch = s.sample(plan.groups)
        kappas.append(cw * float((opt.q / plan.pi).topk(r).values.sum()))
        th = iterates[-1].clone().requires_grad_(True)
        weights = cw * opt.q[plan.groups] / plan.probs
        (g,) = torch.autograd.grad((weights * prob.loss_fn([th], batch)).sum(), th)
        grads.append(g)
        opt.step(lambda b=batch: prob.loss_fn([w], b))
        # sigma_j = (sqrt K_j - sqrt K_{j-1}) / c, centred at theta_j
        if theta_step == "observed":
            sizes = np.array([float(x.norm()) / prob.grad_bound for x in grads])
            assert np.all(sizes <= np.array(kappas) + 1e-12)  # |c g| <= c kappa G surely
        else:
            sizes = np.array(kappas)
        ks = np.cumsum(sizes**2)
        assert opt.game["theta_sq_sum"] == pytest.approx(float(ks[-1]), rel=1e-12)
        assert opt.game["kappa_sq_sum"] == pytest.approx(float(np.sum(np.array(kappas) ** 2)))
        sig = np.diff(np.concatenate([[0.0], np.sqrt(ks)])) / c
        pts = np.stack([x.numpy() for x in iterates])
        gsum = torch.stack(grads).sum(0).numpy()

        def f(x, sig=sig, pts=pts, gsum=gsum):
            diff = x[None, :] - pts
            val = gsum @ x + 0.5 * float((sig * (diff**2).sum(1)).sum())
            return val, gsum + (sig[:, None] * diff).sum(0)

        ball = {"type": "ineq", "fun": lambda x: prob.radius**2 - x @ x, "jac": lambda x: -2 * x}
        res = minimize(
            f,
            iterates[-1].numpy(),
            jac=True,
            method="SLSQP",
            constraints=[ball],
            options={"ftol": 1e-12, "maxiter": 500},
        )
        assert res.success
        torch.testing.assert_close(w.detach(), torch.tensor(res.x), atol=1e-6, rtol=0)
        iterates.append(w.detach().clone())
    norms = [float(x.norm()) for x in iterates]
    assert sum(abs(n - prob.radius) < 1e-9 for n in norms) >= 3  # the ball was active
    assert min(norms) < prob.radius - 0.05  # and inactive at times
    assert max(kappas) > 1.05  # rounds with r < m had weight sums above 1
    assert min(kappas) < 0.99  # and some rounds were down-weighted
    if theta_step == "observed":  # the realised norms are well below the sure bounds here
        assert opt.game["theta_sq_sum"] < 0.5 * opt.game["kappa_sq_sum"]


def test_observed_theta_step_bound_and_bad_arguments():
    """The bound's theta part uses the observed K_t (and is then smaller); bad options fail."""
    prob = make_grouped_logistic(4, 3, 20, radius=2.0, seed=5)
    runs = {}
    for step in ("kappa", "observed"):
        gen = torch.Generator().manual_seed(1)
        w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
        opt = GDROFSQ(
            [w], prob.loss_fn, 4, radius=2.0, grad_bound=prob.grad_bound, generator=gen,
            theta_step=step,
        )  # fmt: skip
        s = prob.sampler(gen)
        for _ in range(30):
            opt.round(s, 2)
        runs[step] = opt
    obs = runs["observed"]
    kw = dict(
        kappa_sq_sum=obs.game["kappa_sq_sum"], reg_radius=4.0, grad_bound=prob.grad_bound,
        lr_theta=obs.param_groups[0]["lr_theta"], lr_q=1.0, q_cap=obs.game["eta_cap"],
        adaptive_v0=1.0,
    )  # fmt: skip
    k_obs = obs.game["theta_sq_sum"]
    assert 0 < k_obs < obs.game["kappa_sq_sum"]
    by_hand = (
        fsq_bound(obs.weight_sum, obs.game["var_sum"], 4, **kw)
        - 2
        * (
            16 * math.sqrt(kw["kappa_sq_sum"]) / (2 * kw["lr_theta"])
            + kw["lr_theta"] * prob.grad_bound**2 * math.sqrt(kw["kappa_sq_sum"])
            - 16 * math.sqrt(k_obs) / (2 * kw["lr_theta"])
            - kw["lr_theta"] * prob.grad_bound**2 * math.sqrt(k_obs)
        )
        / obs.weight_sum
    )
    assert obs.bound() == pytest.approx(by_hand, rel=1e-12)
    assert obs.bound() < fsq_bound(obs.weight_sum, obs.game["var_sum"], 4, **kw)
    # the default's theta_sq_sum is its kappa sum: unchanged method
    assert runs["kappa"].game["theta_sq_sum"] == runs["kappa"].game["kappa_sq_sum"]
    w = torch.zeros(3, requires_grad=True)
    with pytest.raises(ValueError, match="theta_step"):
        GDROFSQ([w], prob.loss_fn, 4, lr_theta=1.0, theta_step="adagrad")
    with pytest.raises(ValueError, match="grad_bound"):
        GDROFSQ([w], prob.loss_fn, 4, lr_theta=1.0, theta_step="observed")


# ---- bad input


def test_bad_constructor_arguments():
    w = torch.zeros(1, requires_grad=True)
    with pytest.raises(ValueError, match="n_groups"):
        GDROFSQ([w], _toy_loss, 1, lr_theta=0.1)
    with pytest.raises(ValueError, match="lr_theta"):
        GDROFSQ([w], _toy_loss, 3, lr_theta=-1.0)
    with pytest.raises(ValueError, match="lr_theta is needed"):
        GDROFSQ([w], _toy_loss, 3)
    with pytest.raises(ValueError, match="loss_fn"):
        GDROFSQ([w], None, 3, lr_theta=0.1)
    with pytest.raises(ValueError, match="theta_update"):
        GDROFSQ([w], _toy_loss, 3, lr_theta=0.1, theta_update="adam")
    with pytest.raises(ValueError, match="lr_q"):
        GDROFSQ([w], _toy_loss, 3, lr_theta=0.1, lr_q=float("nan"))


@pytest.mark.parametrize("r", [0, 4, -2, 2.5])
def test_sample_size_outside_range(r):
    w = torch.zeros(1, requires_grad=True)
    opt = GDROFSQ([w], _toy_loss, 3, lr_theta=0.1)
    with pytest.raises(ValueError, match="r_t"):
        opt.round(_ToySampler(), r)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.5, 1.5])
def test_bad_losses(bad):
    w = torch.zeros(1, requires_grad=True)
    opt = GDROFSQ([w], _toy_loss, 3, lr_theta=0.1)
    opt.plan(2)
    with pytest.raises(ValueError, match="losses"):
        opt.step(lambda: w.sum() * 0 + torch.tensor([0.5, bad]))


def test_wrong_number_of_losses_and_step_without_plan():
    w = torch.zeros(1, requires_grad=True)
    opt = GDROFSQ([w], _toy_loss, 3, lr_theta=0.1)
    with pytest.raises(ValueError, match="plan"):
        opt.step(lambda: torch.zeros(1))
    opt.plan(2)
    with pytest.raises(ValueError, match="one loss per queried group"):
        opt.step(lambda: torch.zeros(3))


def test_loss_fn_receives_the_model_when_given():
    prob = _logistic(m=3)
    model = torch.nn.Linear(3, 1, bias=False, dtype=torch.float64)
    torch.nn.init.zeros_(model.weight)
    seen = []

    def loss_fn(mdl, batch):
        seen.append(mdl)
        z = batch.y * mdl(batch.X).squeeze(-1)
        return torch.nn.functional.softplus(-z) / prob.loss_bound

    gen = torch.Generator().manual_seed(0)
    opt = GDROFSQ(model.parameters(), loss_fn, 3, lr_theta=1.0, model=model, generator=gen)
    s = prob.sampler(gen)
    for _ in range(5):
        opt.round(s, 2)
    assert all(m is model for m in seen)
    assert float(model.weight.detach().abs().sum()) > 0
    with opt.swap_average():
        inside = model.weight.detach().clone()
    torch.testing.assert_close(inside, opt.averaged_params()[0])


@pytest.mark.parametrize("r", [1, 2])
def test_importance_weighted_gradient_and_estimates_are_unbiased(r):
    w = torch.tensor([0.5], requires_grad=True)
    gen = torch.Generator().manual_seed(5)
    opt = GDROFSQ([w], _toy_loss, 3, lr_theta=0.4, lr_q=8.0, generator=gen)
    for _ in range(40):  # move q away from uniform (eta <= 1 at r = m)
        opt.round(_ToySampler(), 3)
    n = 20000
    grad, est = 0.0, torch.zeros(3)
    for _ in range(n):
        plan = opt.plan(r)  # no step: the state, hence q_t and pi_t, stay the same
        q = opt.q
        grad += float((q[plan.groups] / plan.probs * A[plan.groups]).sum()) / n
        est[plan.groups] += 1 / plan.probs / n
    # the unweighted sum (no 1/pi) would miss by far more than the tolerance
    naive = float((opt.plan(r).pi * A).sum())
    assert abs(naive - float((q * A).sum())) > 0.03
    assert grad == pytest.approx(float((q * A).sum()), abs=0.005)
    torch.testing.assert_close(est, torch.ones(3), atol=0.05, rtol=0)


@pytest.mark.parametrize("q_step", ["bound", "adaptive"])
@pytest.mark.parametrize(("m", "radius"), [(4, None), (7, 0.25)])
def test_r_equals_m_is_smd_with_ftrl_options_step_for_step(m, radius, q_step):
    """GDRO-FSQ at r = m and SMDFullInfo(q_update="ftrl", theta_update="ftrl-prox") with the
    same constants, ``q_step``, generator seed and sampler: the same query sets, q, iterates
    and averages in every round (the small radius makes the projection active). With
    ``q_step="adaptive"`` the two reach the observed variances by different code (GDRO-FSQ's
    importance-weighted estimates at pi = 1, SMD's raw gains)."""
    prob = make_grouped_logistic(m, 3, 20, seed=m)
    runs = []
    for kind in ("fsq", "smd"):
        gen = torch.Generator().manual_seed(11)
        w = torch.full((3,), 0.4, dtype=torch.float64, requires_grad=True)
        if kind == "fsq":
            opt = GDROFSQ(
                [w], prob.loss_fn, m, 3.0, lr_q=1.3, radius=radius, q_step=q_step, generator=gen
            )
        else:
            opt = SMDFullInfo(
                [w],
                prob.loss_fn,
                m,
                lr_theta=3.0,
                lr_q=1.3,
                radius=radius,
                q_update="ftrl",
                theta_update="ftrl-prox",
                q_step=q_step,
                generator=gen,
            )
        s = prob.sampler(gen)
        trace = []
        for _ in range(40):
            losses = opt.round(s, m)
            trace.append((opt.q, w.detach().clone(), losses, opt.averaged_params()[0]))
        runs.append((trace, opt.averaged_q()))
    (a, qa), (b, qb) = runs
    for (q1, w1, l1, avg1), (q2, w2, l2, avg2) in zip(a, b, strict=True):
        torch.testing.assert_close(q1, q2, rtol=1e-13, atol=0)
        torch.testing.assert_close(w1, w2, rtol=1e-13, atol=1e-15)
        torch.testing.assert_close(l1, l2, rtol=1e-13, atol=0)
        torch.testing.assert_close(avg1, avg2, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(qa, qb, rtol=1e-13, atol=0)
    if radius is not None:  # the projection was active at some point
        assert any(float(w.norm()) >= radius * (1 - 1e-12) for _, w, _, _ in a)


def test_smd_options_by_hand():
    """The mirror step keeps each round's own step; the FTRL step rescales all past gains;
    with a horizon both are one constant step, and so is the theta step."""
    m, c_q, c_th, T = 3, 0.8, 0.4, 9

    def w0():
        return [torch.tensor([0.5], dtype=torch.float64, requires_grad=True)]

    opts = {
        "md": SMDFullInfo(w0(), _toy_loss, m, c_th, lr_q=c_q),
        "ftrl": SMDFullInfo(w0(), _toy_loss, m, c_th, lr_q=c_q, q_update="ftrl"),
        "horizon": SMDFullInfo(w0(), _toy_loss, m, c_th, lr_q=c_q, horizon=T),
        "adaptive": SMDFullInfo(
            w0(), _toy_loss, m, c_th, lr_q=c_q, q_update="ftrl", q_step="adaptive"
        ),
    }
    a = A.tolist()
    for name, opt in opts.items():
        w = 0.5
        gains = []
        q = [1 / m] * m
        x_obs = 0.0  # the adaptive step's X: the summed q-variances of the played gains
        for t in range(1, 5):
            if name == "ftrl":
                # the FSQ step at r = m: variance proxy 1/4 per round, cap 1
                eta = min(c_q * math.sqrt(math.log(m) / (t / 4)), 1.0)
                q = _softmax([eta * sum(g[i] for g in gains) for i in range(m)])
            elif name == "adaptive":  # GDRO-FSQ's step: v_0 = 1 plus the observed variances
                eta = min(c_q * math.sqrt(math.log(m) / (1.0 + x_obs)), 1.0)
                q = _softmax([eta * sum(g[i] for g in gains) for i in range(m)])
            losses = opt.round(_ToySampler())
            ref = torch.tensor([a[i] * w + C[i].item() for i in range(m)], dtype=torch.float64)
            torch.testing.assert_close(losses, ref)
            gains.append(losses.tolist())
            if name == "adaptive":
                torch.testing.assert_close(opt.q, torch.tensor(q, dtype=opt.q.dtype))
                assert opt.round_weights.eta == pytest.approx(eta, rel=1e-12)
                mean = sum(q[i] * gains[-1][i] for i in range(m))
                x_obs += sum(q[i] * (gains[-1][i] - mean) ** 2 for i in range(m))
            grad = sum(q[i] * a[i] for i in range(m))
            step = c_th / math.sqrt(T) if name == "horizon" else c_th / math.sqrt(t)
            w = w - step * grad
            assert opt.param_groups[0]["params"][0].item() == pytest.approx(w, abs=1e-12)
            if name == "md":  # q_{t+1} = softmax(sum_{j<=t} eta_j l_j)
                q = _softmax(
                    [
                        sum(c_q * math.sqrt(math.log(m) / j) * g[i] for j, g in enumerate(gains, 1))
                        for i in range(m)
                    ]
                )
            elif name == "horizon":
                eta = c_q * math.sqrt(math.log(m) / T)
                q = _softmax([eta * sum(g[i] for g in gains) for i in range(m)])
            if name in ("md", "horizon"):
                torch.testing.assert_close(opt.q, torch.tensor(q, dtype=opt.q.dtype))
    w = torch.tensor([0.5], requires_grad=True)
    with pytest.raises(ValueError, match="q_update"):
        SMDFullInfo([w], _toy_loss, m, lr_theta=0.4, q_update="hedge")
    with pytest.raises(ValueError, match="theta_update"):
        SMDFullInfo([w], _toy_loss, m, lr_theta=0.4, theta_update="ftrl")
    with pytest.raises(ValueError, match="horizon"):
        SMDFullInfo([w], _toy_loss, m, lr_theta=0.4, horizon=0)


def test_adaptive_q_step_by_hand():
    """q_step="adaptive" over a mixed schedule, recomputed from the played rounds: eta_t =
    min(c sqrt(log m / (1 + X_{t-1})), cap_t), cap_t = min_j rho(mean r_1..r_j), the round
    weight c_t = min(1, rho(r_t)/eta_t), gamma = c_t eta_t m / r_t, the weighted estimates,
    X and A_t on them, the weighted averages and the in-expectation bound's q part over
    C_t = sum c_j (README, "Round weights")."""
    from gdro_fsq.sampling import inclusion_probabilities

    m, c_q = 6, 0.9
    prob = make_grouped_logistic(m, 3, 20, radius=2.0, seed=5)
    gen = torch.Generator().manual_seed(5)
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt = GDROFSQ(
        [w], prob.loss_fn, m, radius=2.0, grad_bound=prob.grad_bound, lr_q=c_q, generator=gen
    )
    s = prob.sampler(gen)
    x_sum, a_sum, v_sum, cap, c_sum, k_sum = 0.0, 0.0, 0.0, 1.0, 0.0, 0.0
    est_sum = [0.0] * m
    q_avg = torch.zeros(m, dtype=torch.float64)
    th_avg = torch.zeros(3, dtype=torch.float64)
    weights_seen = []
    sizes = (2, 5, 1, 6, 3, 6, 2, 4, 1, 5)
    for t, r in enumerate(sizes, start=1):
        mean_r = sum(sizes[:t]) / t
        cap = min(cap, 1.0 if mean_r >= m else mean_r / (2 * m))
        eta = min(c_q * math.sqrt(math.log(m) / (1.0 + x_sum)), cap)
        rho = 1.0 if r == m else r / (2 * m)
        cw = min(1.0, rho / eta)
        weights_seen.append(cw)
        q = _softmax([eta * e for e in est_sum])
        gamma = cw * eta * m / r
        assert gamma <= 0.5 + 1e-12
        theta_t = w.detach().clone()
        plan = opt.plan(r)
        assert opt.round_weights.eta == pytest.approx(eta, rel=1e-12)
        assert opt.round_weights.c == pytest.approx(cw, rel=1e-12)
        torch.testing.assert_close(opt.q, torch.tensor(q, dtype=torch.float64))
        pi = inclusion_probabilities(torch.tensor(q, dtype=torch.float64), r, gamma)
        torch.testing.assert_close(plan.pi, pi)
        assert bool((plan.pi >= cw * eta - 1e-12).all())  # so eta * c * estimate <= 1
        # the weighted gradient c g has norm <= c kappa G: K sums (c kappa)^2
        k_sum += (cw * float((torch.tensor(q, dtype=torch.float64) / pi).topk(r).values.sum())) ** 2
        losses = opt.step(lambda p=plan: prob.loss_fn([w], s.sample(p.groups))).tolist()
        est = [0.0] * m
        for k, i in enumerate(plan.groups.tolist()):
            est[i] = cw * losses[k] / float(pi[i])
        assert max(eta * e for e in est) <= 1 + 1e-12
        mean = sum(qi * e for qi, e in zip(q, est, strict=True))
        var = sum(qi * (e - mean) ** 2 for qi, e in zip(q, est, strict=True))
        x_sum += var
        a_sum += eta * var
        v_sum += cw**2 * (m / r - 0.75)
        est_sum = [a + b for a, b in zip(est_sum, est, strict=True)]
        c_sum += cw
        q_avg += cw * torch.tensor(q, dtype=torch.float64)
        th_avg += cw * theta_t
    assert min(weights_seen) < 1 and max(weights_seen) == 1  # both kinds of rounds occurred
    assert opt.weight_sum == pytest.approx(c_sum, rel=1e-12)
    torch.testing.assert_close(opt.averaged_q(), q_avg / c_sum)
    torch.testing.assert_close(opt.averaged_params()[0], th_avg / c_sum)
    assert opt.game["var_obs"] == pytest.approx(x_sum, rel=1e-10)
    assert opt.game["second_moment_sum"] == pytest.approx(a_sum, rel=1e-10)
    assert opt.game["var_sum"] == pytest.approx(v_sum, rel=1e-12)
    assert opt.game["eta_cap"] == pytest.approx(cap, rel=1e-12)
    assert opt.game["kappa_sq_sum"] == pytest.approx(k_sum, rel=1e-12)
    # the bound: 2/C [R^2 sqrt(K)/(2 c_theta) + c_theta G^2 sqrt(K) + q part], R = 2D, with the
    # q part (1/c + 2 sqrt2 c) sqrt((1 + V) log m) + 4 log2(1 + V) + log m / cap
    k, c_th, g = opt.game["kappa_sq_sum"], opt.param_groups[0]["lr_theta"], prob.grad_bound
    theta_part = 16 * math.sqrt(k) / (2 * c_th) + c_th * g**2 * math.sqrt(k)
    q_part = (1 / c_q + 2 * math.sqrt(2) * c_q) * math.sqrt((1 + v_sum) * math.log(m))
    q_part += 4 * math.log2(1 + v_sum) + math.log(m) / cap
    assert opt.bound() == pytest.approx(2 * (theta_part + q_part) / c_sum, rel=1e-12)


@pytest.mark.parametrize("rule", ["mean", "min", "none"])
def test_step_cap_rules_and_round_weights(rule):
    """Each cap rule against its formula, round by round over a mixed schedule: cap_t
    non-increasing, eta_t = min(c sqrt(log m/(1 + X_{t-1})), cap_t), c_t = min(1, rho(r_t)/eta_t)
    (c_t = 1 throughout under "min"), every weighted estimate with eta c l/pi <= 1."""
    m = 7
    prob = make_grouped_logistic(m, 3, 20, radius=2.0, seed=11)
    gen = torch.Generator().manual_seed(11)
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt = GDROFSQ(
        [w], prob.loss_fn, m, radius=2.0, grad_bound=prob.grad_bound, step_cap=rule, generator=gen
    )
    s = prob.sampler(gen)

    def rho(r):
        return 1.0 if r >= m else r / (2 * m)

    sizes = [4, 6, 1, 7, 2, 5, 1, 3, 7, 2, 6, 1]
    cap, caps, cws = 1.0, [], []
    for t, r in enumerate(sizes, start=1):
        if rule == "mean":
            cap = min(cap, rho(sum(sizes[:t]) / t))
        elif rule == "min":
            cap = min(cap, rho(r))
        free = math.sqrt(math.log(m) / (1.0 + opt.game["var_obs"]))
        eta = min(free, cap)
        cw = min(1.0, rho(r) / eta)
        plan = opt.plan(r)
        assert opt.round_weights.eta == pytest.approx(eta, rel=1e-12)
        assert opt.round_weights.c == pytest.approx(cw, rel=1e-12)
        assert bool((plan.pi >= cw * eta - 1e-12).all())
        opt.step(lambda p=plan: prob.loss_fn([w], s.sample(p.groups)))
        caps.append(cap)
        cws.append(cw)
    assert all(a >= b for a, b in itertools.pairwise(caps))
    assert opt.weight_sum == pytest.approx(sum(cws), rel=1e-12)
    if rule == "min":
        assert cws == [1.0] * len(sizes) and caps[-1] == pytest.approx(1 / (2 * m))
    else:
        assert min(cws) < 1.0  # the rounds with r = 1 were down-weighted
        assert caps[-1] > 1 / (2 * m)  # and did not cap the step for good
    assert opt.bound() > 0 and opt.bound_hp(0.1) > 0


def test_bad_step_cap():
    prob = make_grouped_logistic(3, 2, 10, seed=0)
    w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match="step_cap"):
        GDROFSQ([w], prob.loss_fn, 3, radius=1.0, grad_bound=1.0, step_cap="median")


def test_optimistic_bonus_by_hand():
    """q_bonus (README, "Optimistic bonus"): beta_t = b eta_t, the round weight and exploration
    for eta_t (1 + beta_t), the estimates c_t (l_hat + beta_t / pi) on every group; the first
    round with numbers, then a mixed schedule recomputed from the played rounds."""
    from gdro_fsq.sampling import inclusion_probabilities

    m, c_q, b = 4, 0.9, 0.7
    prob = make_grouped_logistic(m, 3, 20, radius=2.0, seed=8)
    gen = torch.Generator().manual_seed(8)
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt = GDROFSQ(
        [w], prob.loss_fn, m, radius=2.0, grad_bound=prob.grad_bound, lr_q=c_q, q_bonus=b,
        generator=gen,
    )  # fmt: skip
    s = prob.sampler(gen)
    # round 1 by hand: q uniform, cap rho(2) = 1/4 < 0.9 sqrt(log 4), eta = 1/4, beta = 0.175,
    # c = 1/1.175, gamma = c eta (1 + beta) m / r = 1/2, a = 1/2 each, pi = 1/4 + 1/4 = 1/2
    plan = opt.plan(2)
    assert opt.round_weights.eta == pytest.approx(
        0.25
    ) and opt.round_weights.bonus == pytest.approx(0.175)
    assert opt.round_weights.c == pytest.approx(1 / 1.175)
    assert opt.round_weights.gamma == pytest.approx(0.5)
    torch.testing.assert_close(plan.pi, torch.full((4,), 0.5, dtype=plan.pi.dtype))
    losses = opt.step(lambda: prob.loss_fn([w], s.sample(plan.groups))).double()
    want = torch.full((4,), 0.35 / 1.175, dtype=torch.float64)
    for k, i in enumerate(plan.groups.tolist()):
        want[i] = (2 * float(losses[k]) + 0.35) / 1.175
    torch.testing.assert_close(opt.game["est_sum"], want, rtol=1e-12, atol=0)
    # then a mixed schedule against a recomputation
    x_sum, cap, est_sum = 0.0, 0.25, want.clone()
    q = torch.softmax(0.25 * est_sum * 0, 0)
    var = float((q * est_sum**2).sum() - (q * est_sum).sum() ** 2)
    x_sum += var
    sizes = (2, 1, 3, 4, 2, 1, 4)
    for t, r in enumerate(sizes[1:], start=2):
        mean_r = sum(sizes[:t]) / t
        cap = min(cap, 1.0 if mean_r >= m else mean_r / (2 * m))
        eta = min(c_q * math.sqrt(math.log(m) / (1.0 + x_sum)), cap)
        beta = b * eta
        rho = 1.0 if r == m else r / (2 * m)
        cw = min(1.0, rho / (eta * (1 + beta)))
        gamma = min(0.5, cw * eta * (1 + beta) * m / r)
        q = _softmax([eta * float(e) for e in est_sum])
        q = torch.tensor(q, dtype=torch.float64)
        pi = inclusion_probabilities(q, r, gamma).to(torch.float64)
        plan = opt.plan(r)
        assert opt.round_weights.eta == pytest.approx(eta, rel=1e-12)
        assert opt.round_weights.bonus == pytest.approx(beta, rel=1e-12)
        assert opt.round_weights.c == pytest.approx(cw, rel=1e-12)
        torch.testing.assert_close(opt.q, q, rtol=1e-12, atol=1e-15)
        torch.testing.assert_close(plan.pi.to(torch.float64), pi, rtol=1e-12, atol=1e-15)
        losses = opt.step(lambda p=plan: prob.loss_fn([w], s.sample(p.groups))).double()
        est = cw * beta / pi
        for k, i in enumerate(plan.groups.tolist()):
            est[i] += cw * float(losses[k]) / float(pi[i])
        assert float((cw * eta * est).max()) <= 1 + 1e-12  # the exponential-weights range
        est_sum = est_sum + est
        x_sum += float((q * est**2).sum() - (q * est).sum() ** 2)
        torch.testing.assert_close(opt.game["est_sum"], est_sum, rtol=1e-12, atol=1e-15)
        assert opt.game["var_obs"] == pytest.approx(x_sum, rel=1e-12)
    with pytest.raises(ValueError, match="q_bonus"):
        opt.bound()
    with pytest.raises(ValueError, match="q_bonus"):
        opt.bound_hp(0.1)
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="q_bonus"):
            GDROFSQ([w], prob.loss_fn, m, lr_theta=1.0, q_bonus=bad)
    with pytest.raises(ValueError, match="q_bonus"):
        GDROFSQ([w], prob.loss_fn, m, lr_theta=1.0, q_bonus=0.5, estimator="ix")


def test_zero_bonus_is_the_default_method():
    prob = make_grouped_logistic(5, 3, 20, radius=2.0, seed=9)
    trajectories = []
    for kw in ({}, {"q_bonus": 0.0}):
        gen = torch.Generator().manual_seed(9)
        w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
        opt = GDROFSQ(
            [w], prob.loss_fn, 5, radius=2.0, grad_bound=prob.grad_bound, generator=gen, **kw
        )
        s = prob.sampler(gen)
        for t in range(1, 30):
            opt.round(s, 1 + t % 5)
        trajectories.append((w.detach().clone(), opt.q.clone(), opt.bound()))
    assert torch.equal(trajectories[0][0], trajectories[1][0])
    assert torch.equal(trajectories[0][1], trajectories[1][1])
    assert trajectories[0][2] == trajectories[1][2]
