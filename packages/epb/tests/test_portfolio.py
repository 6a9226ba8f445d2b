"""The bottleneck: a valid mixture distribution, exact gradients, fitting lowers the KL."""

import math

import torch

from epb.policy import FunctionTeacher
from epb.portfolio import Portfolio, collect_states, kl_per_state
from epb.problems import random_tsp
from epb.programs import compile_program


def nn_teacher(temp=0.07):
    return FunctionTeacher(lambda s: -s.dist[torch.arange(len(s.current)), s.current], temp)


def small_bank(n_inst=5, n=9, seed=0):
    inst = random_tsp(n_inst, n, torch.Generator().manual_seed(seed))
    return collect_states(nn_teacher(), inst, starts=2)


PROGS = [
    "def score(s):\n    return -s.d_cur",
    "def score(s):\n    return s.min_to_visited",
    "def score(s):\n    return -s.detour + 0.3 * s.x",
]


def test_mixture_is_a_valid_distribution_and_matches_explicit_sum():
    bank = small_bank()
    torch.manual_seed(1)
    port = Portfolio([compile_program(p, f"p{i}") for i, p in enumerate(PROGS)])
    with torch.no_grad():
        port.log_beta.copy_(torch.randn(3))
        lq = port.log_probs(bank)
        q = lq.exp()
        # explicit float64 mixture: sum_k w_k softmax(beta_k g_k) over feasible nodes
        g = torch.stack([p.scores(bank.feats) for p in port.programs], 1).double()
        w = port.weights(bank).double().exp()
        z = g * port.log_beta.double().exp()[None, :, None]
        z = z.masked_fill(~bank.mask[:, None], -math.inf)
        ref = (w[:, :, None] * z.softmax(-1)).sum(1)
    assert torch.allclose(q.double(), ref, atol=1e-5)
    assert torch.allclose(q.sum(-1), torch.ones(len(bank)), atol=1e-5)
    assert (q[~bank.mask] < 1e-12).all() and (q >= 0).all()


def test_router_and_temperature_gradients_match_finite_differences():
    bank = small_bank(3, 7).to(torch.float64)
    torch.manual_seed(0)
    port = Portfolio([compile_program(p, f"p{i}") for i, p in enumerate(PROGS)], hidden=5)
    port = port.double()
    port.router.set_stats(bank.router_in)
    params = [p for p in port.parameters()]
    loss = port.loss(bank)
    grads = torch.autograd.grad(loss, params)
    gen = torch.Generator().manual_seed(3)
    eps = 1e-6
    for p, g in zip(params, grads, strict=True):
        for _ in range(3):
            i = int(torch.randint(p.numel(), (1,), generator=gen))
            with torch.no_grad():
                old = p.view(-1)[i].item()
                p.view(-1)[i] = old + eps
                up = port.loss(bank).item()
                p.view(-1)[i] = old - eps
                down = port.loss(bank).item()
                p.view(-1)[i] = old
            fd = (up - down) / (2 * eps)
            assert abs(fd - g.view(-1)[i].item()) <= 1e-6 + 1e-4 * abs(fd)


def test_fit_recovers_the_teacher_program():
    bank = small_bank(8, 10, seed=4)
    port = Portfolio([compile_program(p, f"p{i}") for i, p in enumerate(PROGS)])
    before = port.loss(bank).item()
    after = port.fit(bank, steps=150)
    fid = port.fidelity(bank)
    # the teacher is softmax(-d_cur / 0.07): program p0 with beta = 1/0.07 reproduces it
    assert after < 0.2 * before and fid["agreement"] > 0.97
    w = port.weights(bank).exp().mean(0)
    assert w[0] > 0.5
    assert abs(port.log_beta[0].exp().item() - 1 / 0.07) < 3.0


def test_kl_per_state_against_direct_formula():
    torch.manual_seed(0)
    mask = torch.rand(4, 6) > 0.3
    mask[:, 0] = True
    t = torch.randn(4, 6).masked_fill(~mask, -math.inf).log_softmax(-1)
    q = torch.randn(4, 6).masked_fill(~mask, -math.inf).log_softmax(-1)
    ref = [
        sum(float(t[s, a].exp() * (t[s, a] - q[s, a])) for a in range(6) if mask[s, a])
        for s in range(4)
    ]
    assert torch.allclose(kl_per_state(t, q, mask), torch.tensor(ref), atol=1e-6)


def test_router_penalty_is_the_l2_norm_of_its_weights_and_shrinks_them():
    bank = small_bank(6, 11, seed=7)
    norms = {}
    for wd in (0.0, 0.05):
        torch.manual_seed(2)
        port = Portfolio(
            [compile_program(p, f"p{i}") for i, p in enumerate(PROGS)], weight_decay=wd
        )
        mats = [port.router.net[0].weight, port.router.net[2].weight]
        ref = wd * sum(float((m.detach().double() ** 2).sum()) for m in mats)
        assert math.isclose(float(port.penalty().detach()), ref, rel_tol=1e-5, abs_tol=1e-12)
        kl = port.fit(bank, steps=120)
        # fit reports the KL alone, not KL + penalty
        assert math.isclose(kl, port.loss(bank).item(), rel_tol=1e-6)
        norms[wd] = sum(float((m.detach() ** 2).sum()) for m in mats)
        assert port.clone_with(port.programs).weight_decay == wd
    assert norms[0.05] < norms[0.0]
