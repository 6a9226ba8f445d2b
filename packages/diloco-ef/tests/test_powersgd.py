"""PowerSGD with a shared Q (two all-reduces) against float64 SVD, projections computed
without QR, an independent DiLoCo-PowerSGD loop, and the byte count from the shapes."""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch

from diloco_ef import DiLoCo, ErrorFeedback, LocalCommunicator, PowerSGD, contraction
from diloco_ef.experiments import lm_bits as L
from diloco_ef.powersgd import powersgd_exchange

EPS = torch.finfo(torch.float64).eps


def _with_spectrum(gen, m, n, s):
    """``U diag(s) V^T`` with random orthonormal U (m x k), V (n x k), k = len(s)."""
    k = len(s)
    u = torch.linalg.qr(torch.randn(m, k, generator=gen, dtype=torch.float64)).Q
    v = torch.linalg.qr(torch.randn(n, k, generator=gen, dtype=torch.float64)).Q
    return u @ torch.diag(torch.tensor(s, dtype=torch.float64)) @ v.T, v


def _best_rank(mat, r):
    u, s, vh = torch.linalg.svd(mat, full_matrices=False)
    return u[:, :r] @ torch.diag(s[:r]) @ vh[:r]


def _projection(a, mat):
    """``A (A^T A)^{-1} A^T M``: the projection of M's columns onto range(A), no QR."""
    return a @ torch.linalg.solve(a.T @ a, a.T @ mat)


def _tol(a, mat):
    # Normal equations lose cond(A)^2; the products add about size * eps; with slack 10.
    cond = float(torch.linalg.cond(a))
    return 10 * EPS * cond**2 * max(mat.shape) * float(mat.norm())


def _exchange(c, workers, inputs, efs=None, seed=0):
    """One exchange of ``inputs[w][i]`` by ``workers`` simulated workers."""
    comm = LocalCommunicator(workers)
    efs = efs if efs is not None else [ErrorFeedback(c) for _ in range(workers)]
    avg, sents = powersgd_exchange(
        c, comm, efs, inputs, lambda i: torch.Generator().manual_seed(seed * 1000 + i)
    )
    return avg, sents, efs, comm


@pytest.mark.parametrize(("shape", "q", "workers"), [((13, 7), 2, 3), ((5, 3, 4), 1, 4)])
def test_one_round_projects_the_mean_onto_the_range_of_mean_q(gen, shape, q, workers):
    xs = [torch.randn(*shape, generator=gen, dtype=torch.float64) for _ in range(workers)]
    mats = [x.reshape(shape[0], -1) for x in xs]
    mean = sum(mats) / workers
    q0 = torch.randn(mean.shape[1], q, generator=gen, dtype=torch.float64)
    efs = [ErrorFeedback(PowerSGD(rank=q)) for _ in range(workers)]
    for ef in efs:
        ef.states[0] = {"q": q0.clone()}
    avg, sents, efs, _ = _exchange(PowerSGD(rank=q), workers, [[x] for x in xs], efs)
    a = mean @ q0
    ref = _projection(a, mean)
    tol = _tol(a, mean)
    assert avg[0].shape == shape
    assert float((avg[0].reshape(mean.shape) - ref).abs().max()) <= tol
    # Each worker's share is the same projection of its own matrix; the shares average to it.
    for s, mat in zip(sents, mats, strict=True):
        share = s[0].tensor.reshape(mat.shape)
        assert float((share - _projection(a, mat)).abs().max()) <= _tol(a, mat)
    mean_share = sum(s[0].tensor for s in sents) / workers
    assert torch.allclose(mean_share, avg[0], rtol=0, atol=workers * EPS * float(mean.norm()))
    # The warm start is M_mean^T P on every worker, the very same tensor everywhere.
    p = sents[0][0].payload.sent["p"]
    assert torch.allclose(p.T @ p, torch.eye(q, dtype=torch.float64), atol=50 * EPS)
    for ef in efs:
        assert torch.equal(ef.states[0]["q"], efs[0].states[0]["q"])
    assert torch.allclose(efs[0].states[0]["q"], mean.T @ p, atol=50 * EPS * float(mean.norm()))


def test_start_at_the_mean_top_singular_vectors_gives_its_best_rank_q(gen):
    # The workers' matrices differ a lot; the mean has a known spectrum.
    mean, v = _with_spectrum(gen, 11, 9, [9.0, 6.0, 2.0, 1.0, 0.3])
    noise = [torch.randn(11, 9, generator=gen, dtype=torch.float64) for _ in range(3)]
    offs = [n - sum(noise) / 3 for n in noise]  # sum to zero
    xs = [mean + 5 * o for o in offs]
    efs = [ErrorFeedback(PowerSGD(rank=2)) for _ in range(3)]
    for ef in efs:
        ef.states[0] = {"q": v[:, :2].clone()}
    avg, _, _, _ = _exchange(PowerSGD(rank=2), 3, [[x] for x in xs], efs)
    best = _best_rank(mean, 2)
    assert float((avg[0] - best).abs().max()) <= 1e3 * EPS * float(mean.norm())
    alpha = contraction(mean, avg[0])
    assert alpha == pytest.approx((81 + 36) / (81 + 36 + 4 + 1 + 0.09), rel=1e-12)


def test_warm_start_converges_to_the_mean_svd_at_the_spectral_gap_rate(gen):
    # EF off, the same worker matrices every round: subspace iteration on their mean.
    # sigma_3 / sigma_2 = 0.25, so the error shrinks by about 0.0625 per round.
    mean, _ = _with_spectrum(gen, 12, 10, [8.0, 4.0, 1.0, 0.5, 0.25])
    noise = [torch.randn(12, 10, generator=gen, dtype=torch.float64) for _ in range(4)]
    xs = [mean + n - sum(noise) / 4 for n in noise]
    best = _best_rank(mean, 2)
    c = PowerSGD(rank=2)
    efs = [ErrorFeedback(c, enabled=False) for _ in range(4)]
    errs = []
    for _ in range(12):
        avg, _, efs, _ = _exchange(c, 4, [[x] for x in xs], efs)
        errs.append(float((avg[0] - best).norm()))
    assert errs[0] > 1e-3  # the shared random start is not already the answer
    assert errs[-1] < 1e3 * EPS * float(mean.norm())
    rates = [b / a for a, b in itertools.pairwise(errs[2:8])]
    assert all(r < 1.5 * 0.25**2 for r in rates), rates


def test_one_worker_exchange_equals_compress_and_alone_is_lowrank_math(gen):
    c = PowerSGD(rank=2)
    x = torch.randn(9, 4, 2, generator=gen, dtype=torch.float64)
    state: dict = {}
    alone = c.decompress(c.compress(x, torch.Generator().manual_seed(5), state=state))
    avg, _, efs, _ = _exchange(c, 1, [[x]], seed=0)
    # same first Q: the exchange's generator for tensor 0 is seeded 0 * 1000 + 0
    state0: dict = {}
    alone0 = c.decompress(c.compress(x, torch.Generator().manual_seed(0), state=state0))
    assert torch.allclose(avg[0], alone0, atol=0, rtol=0)
    assert torch.equal(efs[0].states[0]["q"], state0["q"])
    assert alone.shape == x.shape and "q" in state


def test_error_feedback_identity_over_rounds_and_telescoping(gen):
    c = PowerSGD(rank=1)
    efs = [ErrorFeedback(c) for _ in range(3)]
    shape = (7, 6)
    total_sent = [torch.zeros(shape, dtype=torch.float64) for _ in range(3)]
    total_in = [torch.zeros(shape, dtype=torch.float64) for _ in range(3)]
    for _ in range(6):
        us = [torch.randn(*shape, generator=gen, dtype=torch.float64) for _ in range(3)]
        vs = [ef.pending(0, u) for ef, u in zip(efs, us, strict=True)]
        _, sents, efs, _ = _exchange(c, 3, [[u] for u in us], efs)
        for w in range(3):
            s, e = sents[w][0].tensor, efs[w].errors[0]
            assert torch.equal(e, vs[w] - s)
            assert torch.all((s + e - vs[w]).abs() <= EPS * (e.abs() + vs[w].abs()))
            total_sent[w] += s
            total_in[w] += us[w]
    for w in range(3):
        assert torch.allclose(total_sent[w], total_in[w] - efs[w].errors[0], atol=1e-13)


def test_zero_input_and_dense_tensors(gen):
    c = PowerSGD(rank=2)
    zero = [[torch.zeros(6, 5, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)]] * 2
    avg, sents, _, _ = _exchange(c, 2, zero)
    assert all(bool((a == 0).all()) for a in avg)
    assert all(s.alpha == 1.0 for mine in sents for s in mine)
    # vectors and small matrices (r(m+n) >= mn) travel dense and average exactly
    xs = [
        [torch.randn(4, generator=gen, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)]
        for _ in range(3)
    ]
    avg, _, efs, _ = _exchange(c, 3, xs)
    for i in range(2):
        ref = (xs[0][i] + xs[1][i] + xs[2][i]) / 3
        assert torch.allclose(avg[i], ref, rtol=0, atol=4 * EPS * float(ref.abs().max()))
    assert all(bool((ef.errors[i] == 0).all()) for ef in efs for i in range(2))


@pytest.mark.parametrize("workers", [1, 3, 4])
def test_metered_bytes_from_the_shapes(gen, workers):
    # emb-like 16x8, fc-like 48x16 (4-d input viewed as a matrix), a vector, a 2x3 (dense).
    shapes = [(16, 8), (48, 4, 4), (16,), (2, 3)]
    c = PowerSGD(rank=2)
    xs = [
        [torch.randn(*s, generator=gen, dtype=torch.float32) for s in shapes]
        for _ in range(workers)
    ]
    _, sents, _, comm = _exchange(c, workers, xs)
    p_vals = 16 * 2 + 48 * 2 + 16 + 6  # P factors and the dense tensors
    q_vals = 8 * 2 + 16 * 2
    counts = comm.meter.counts["all_reduce"]
    assert counts["calls"] == 2
    assert counts["handed"] == 4 * (p_vals + q_vals)
    assert counts["sent"] == pytest.approx(2 * (workers - 1) / workers * 4 * (p_vals + q_vals))
    assert sum(s.bits for s in sents[0]) == 32 * (p_vals + q_vals)


def test_lm_bits_tiny_lm_bytes_and_names():
    c = L.make_compressor("powersgd1")
    assert isinstance(c, PowerSGD) and c.rank == 1
    model = L.TinyLM(16, 8, 48)
    ranks = [c.factor_rank(p.shape) for p in model.parameters()]
    assert ranks == [1, 1, 0, 1, 0]
    per_round = sum(
        (p.shape[0] + p[0].numel()) if r else p.numel()
        for p, r in zip(model.parameters(), ranks, strict=True)
    )
    assert per_round == (16 + 8) + (48 + 16) + 48 + (16 + 48) + 16 == 216


def _independent_diloco_powersgd(make, loss, rounds, workers, h, rank, inner_lr, outer, seed):
    """DiLoCo with PowerSGD + EF written out directly (float64), for comparison."""
    from diloco_ef._rng import keyed_generator

    x = [p.detach().clone() for p in make().parameters()]
    slow = [t.clone().requires_grad_(True) for t in x]
    opt = outer(slow)
    errs = [[torch.zeros_like(t) for t in x] for _ in range(workers)]
    qs: dict[int, torch.Tensor] = {}
    for r in range(rounds):
        deltas = []
        for w in range(workers):
            m = make()
            with torch.no_grad():
                for p, t in zip(m.parameters(), slow, strict=True):
                    p.copy_(t)
            sgd = torch.optim.SGD(m.parameters(), lr=inner_lr)
            for step in range(h):
                sgd.zero_grad()
                loss(m, w, r, step).backward()
                sgd.step()
            deltas.append(
                [s.detach() - p.detach() for s, p in zip(slow, m.parameters(), strict=True)]
            )
        avg = []
        for i, t in enumerate(x):
            vs = [errs[w][i] + deltas[w][i] for w in range(workers)]
            mats = [v.reshape(v.shape[0], -1) for v in vs]
            rr = min(rank, *mats[0].shape) if t.dim() >= 2 else 0
            if rr == 0 or rr * sum(mats[0].shape) >= mats[0].numel():
                avg.append(sum(vs) / workers)
                for w in range(workers):
                    errs[w][i] = torch.zeros_like(t)
                continue
            if i not in qs:
                g = keyed_generator(seed, 0, i)
                qs[i] = torch.randn(mats[0].shape[1], rr, generator=g, dtype=t.dtype)
            p_hat = torch.linalg.qr(sum(mv @ qs[i] for mv in mats) / workers).Q
            q_loc = [mv.T @ p_hat for mv in mats]
            qs[i] = sum(q_loc) / workers
            avg.append((p_hat @ qs[i].T).reshape(t.shape))
            for w in range(workers):
                errs[w][i] = vs[w] - (p_hat @ q_loc[w].T).reshape(t.shape)
        for s, a in zip(slow, avg, strict=True):
            s.grad = a
        opt.step()
        opt.zero_grad()
    return [s.detach() for s in slow]


def test_diloco_with_powersgd_equals_an_independent_loop():
    x = torch.randn(3, 10, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    y = torch.randn(3, 10, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(4))

    def make():
        torch.manual_seed(11)
        return torch.nn.Sequential(
            torch.nn.Linear(6, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)
        ).double()

    def loss(m, w, r, h):
        return ((m(x[w]) - y[w]) ** 2).mean() * (1 + 0.1 * ((r + h) % 3))

    def outer(p):
        return torch.optim.SGD(p, lr=0.7, momentum=0.9, nesterov=True)

    algo = DiLoCo(
        make(),
        lambda p: torch.optim.SGD(p, lr=0.05),
        outer,
        inner_steps=3,
        num_workers=3,
        compressor=PowerSGD(rank=1),
        seed=5,
    )
    for _ in range(5):
        algo.round(loss)
    ref = _independent_diloco_powersgd(make, loss, 5, 3, 3, 1, 0.05, outer, seed=5)
    for a, b in zip(algo.outer_params, ref, strict=True):
        torch.testing.assert_close(a.detach(), b, rtol=1e-12, atol=1e-13)
    assert 0 < algo.history[-1]["alpha"] < 1
    # bits per round: 3 workers x 64 x (7+6 factors, 7 bias, 3x7 dense... rank 1: 3+7, 3 bias)
    assert algo.history[-1]["bits"] == 3 * 64 * ((7 + 6) + 7 + (3 + 7) + 3)


def test_diloco_checkpoint_keeps_the_shared_q(gen):
    x = torch.randn(2, 8, 6, dtype=torch.float64, generator=gen)

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(6, 9), torch.nn.Tanh(), torch.nn.Linear(9, 4))

    def loss(m, w, r, h):
        return (m(x[w].float()) ** 2).mean() * (1 + 0.2 * ((r + h) % 2))

    kw = {
        "inner": lambda p: torch.optim.SGD(p, lr=0.05),
        "outer": lambda p: torch.optim.SGD(p, lr=0.7, momentum=0.9, nesterov=True),
        "inner_steps": 2,
        "num_workers": 2,
        "compressor": PowerSGD(rank=1),
    }
    a = DiLoCo(make(), **kw)
    for _ in range(3):
        a.round(loss)
    ckpt = copy.deepcopy(a.state_dict())
    for _ in range(3):
        a.round(loss)
    b = DiLoCo(make(), **kw)
    b.load_state_dict(ckpt)
    for _ in range(3):
        b.round(loss)
    assert all(torch.equal(p, q) for p, q in zip(a.outer_params, b.outer_params, strict=True))
    assert a.history == b.history
    with pytest.raises(ValueError, match="compressor"):
        DiLoCo(make(), **{**kw, "compressor": PowerSGD(rank=2)}).load_state_dict(ckpt)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_bad_rank_is_refused(bad):
    with pytest.raises(ValueError, match="rank"):
        PowerSGD(rank=bad)


def test_half_precision_and_integer_matrices_are_refused():
    c = PowerSGD(rank=1)
    with pytest.raises(ValueError, match=r"float32 or float64 matrices, got torch.bfloat16"):
        c.compress(torch.ones(4, 3, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="bfloat16"):
        _exchange(c, 2, [[torch.ones(4, 3, dtype=torch.bfloat16)]] * 2)
    with pytest.raises(ValueError, match="floating"):
        c.compress(torch.ones(4, 3, dtype=torch.int64))
    assert torch.equal(c(torch.ones(3, dtype=torch.bfloat16)), torch.ones(3, dtype=torch.bfloat16))


def test_traffic_per_rank_does_not_grow_with_workers(gen):
    # Message per worker fixed; per-rank traffic 2(M-1)/M times it, below twice it for every M.
    c = PowerSGD(rank=1)
    sent = {}
    for m in (2, 4, 8):
        xs = [[torch.randn(20, 12, generator=gen)] for _ in range(m)]
        *_, comm = _exchange(c, m, xs)
        sent[m] = comm.meter.totals()["sent"]
        assert sent[m] == pytest.approx(2 * (m - 1) / m * 4 * (20 + 12))
    assert math.isclose(sent[8] / sent[2], (2 * 7 / 8) / 1.0)
