"""The PowerSGD-style low-rank compressor against float64 SVD, projections and brute force."""

import copy
import itertools
import math

import pytest
import torch

from diloco_ef import (
    EFSGD,
    AbsmaxQuant,
    DiLoCo,
    ErrorFeedback,
    Identity,
    Int8Absmax,
    LowRank,
    RandomK,
    ScaledSign,
    contraction,
)
from diloco_ef.experiments import lm_bits as L


def _with_spectrum(gen, m, n, s):
    """``U diag(s) V^T`` with random orthonormal U (m x k), V (n x k), k = len(s)."""
    k = len(s)
    u = torch.linalg.qr(torch.randn(m, k, generator=gen, dtype=torch.float64)).Q
    v = torch.linalg.qr(torch.randn(n, k, generator=gen, dtype=torch.float64)).Q
    return u @ torch.diag(torch.tensor(s, dtype=torch.float64)) @ v.T, v


def _best_rank(mat, r):
    """Eckart-Young: the SVD truncated to r terms (float64)."""
    u, s, vh = torch.linalg.svd(mat.double(), full_matrices=False)
    return u[:, :r] @ torch.diag(s[:r]) @ vh[:r]


@pytest.mark.parametrize(("shape", "q"), [((13, 7), 2), ((5, 3, 4), 1), ((9, 11), 3)])
def test_one_step_is_the_projection_onto_the_range_of_mq(gen, shape, q):
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    mat = x.reshape(shape[0], -1)
    q0 = torch.randn(mat.shape[1], q, generator=gen, dtype=torch.float64)
    state = {"q": q0.clone()}
    c = LowRank(rank=q)
    p = c.compress(x, state=state)
    out = c.decompress(p)
    # Independent reference: A (A^T A)^{-1} A^T M with A = M Q0 (normal equations, no QR).
    a = mat @ q0
    ref = a @ torch.linalg.solve(a.T @ a, a.T @ mat)
    assert out.shape == x.shape
    assert torch.allclose(out.reshape(mat.shape), ref, rtol=0, atol=1e-12 * float(mat.norm()))
    # The new warm start is M^T P, and alpha = ||Q||^2 / ||M||^2 (P orthonormal).
    assert torch.allclose(state["q"], mat.T @ p.sent["p"], atol=1e-12)
    alpha = contraction(x, out)
    assert alpha == pytest.approx(float(state["q"].pow(2).sum() / mat.pow(2).sum()), rel=1e-10)
    assert torch.allclose(p.sent["p"].T @ p.sent["p"], torch.eye(q, dtype=torch.float64))


def test_start_at_top_singular_vectors_gives_the_best_rank_q(gen):
    s = [9.0, 7.0, 2.0, 1.0, 0.5]
    mat, v = _with_spectrum(gen, 17, 10, s)
    c = LowRank(rank=2)
    out = c.decompress(c.compress(mat, state={"q": v[:, :2].clone()}))
    assert torch.allclose(out, _best_rank(mat, 2), atol=1e-12)
    assert contraction(mat, out) == pytest.approx((81 + 49) / sum(x * x for x in s), rel=1e-12)


def test_warm_start_converges_to_svd_at_the_spectral_gap_rate(gen):
    # sigma_3 / sigma_2 = 0.25: the subspace error shrinks by about 0.25^2 per call.
    s = [8.0, 4.0, 1.0, 0.5, 0.25]
    mat, _ = _with_spectrum(gen, 12, 9, s)
    best = _best_rank(mat, 2)
    c = LowRank(rank=2)
    state: dict = {}
    errs = []
    for t in range(12):
        out = c.decompress(c.compress(mat, torch.Generator().manual_seed(t), state=state))
        errs.append(float((out - best).norm()))
    assert errs[0] > 1e-3  # a random start is not already the answer
    assert errs[-1] < 1e-10
    rates = [b / a for a, b in itertools.pairwise(errs[2:8])]
    assert all(r < 1.5 * 0.25**2 for r in rates)
    # Without the state every call starts afresh from a random Q: no convergence.
    cold = [float((c(mat, torch.Generator().manual_seed(t)) - best).norm()) for t in range(12, 16)]
    assert min(cold) > 1e-6


def test_exact_for_matrices_of_rank_at_most_q(gen):
    mat, _ = _with_spectrum(gen, 15, 8, [3.0, 1.0])
    c = LowRank(rank=3)
    out = c(mat, torch.Generator().manual_seed(1))
    assert torch.allclose(out, mat, atol=1e-12)
    assert contraction(mat, out) == pytest.approx(1.0, abs=1e-12)


def test_flat_spectrum_gives_alpha_q_over_n_for_any_start(gen):
    mat, _ = _with_spectrum(gen, 14, 6, [2.0] * 6)
    c = LowRank(rank=2)
    for t in range(5):
        assert contraction(mat, c(mat, torch.Generator().manual_seed(t))) == pytest.approx(
            2 / 6, rel=1e-10
        )


def test_alpha_never_exceeds_eckart_young_and_is_nonnegative(gen):
    c = LowRank(rank=2)
    for t in range(20):
        mat = torch.randn(7, 10, generator=gen, dtype=torch.float64)
        sv2 = torch.linalg.svdvals(mat).pow(2)
        bound = float(sv2[:2].sum() / sv2.sum())
        a = contraction(mat, c(mat, torch.Generator().manual_seed(t)))
        assert -1e-12 <= a <= bound + 1e-12
    assert contraction(torch.zeros(4, 5), c(torch.zeros(4, 5))) == 1.0


@pytest.mark.parametrize("fdt", [None, torch.bfloat16])
def test_bits_by_brute_force_over_shapes(gen, fdt):
    fallback = Int8Absmax()
    c = LowRank(rank=2, fallback=fallback, factor_dtype=fdt)
    width = 32 if fdt is None else 16
    for shape in [(13, 7), (5, 3, 4), (1, 9), (3, 3), (4, 5), (31,), ()]:
        x = torch.randn(shape, generator=gen)
        p = c.compress(x, torch.Generator().manual_seed(0))
        d = math.prod(shape)
        if len(shape) < 2:
            expect = 8 * d + 32  # the fallback: int8 levels and one float32 scale
            assert torch.equal(c.decompress(p), fallback(x))
        else:
            m, n = shape[0], d // shape[0]
            r = min(2, m, n)
            # factors q(m+n) values; the whole matrix when that is no cheaper than m n values
            expect = width * (r * (m + n) if r * (m + n) < m * n else m * n)
        assert c.bits_sent(p) == expect, shape
        # and what the payload holds is exactly that many values at that width
        held = sum(t.numel() * t.element_size() * 8 for t in p.sent.values())
        assert held == expect, shape


def test_bf16_factors_are_what_is_reconstructed(gen):
    x = torch.randn(12, 20, generator=gen)
    c = LowRank(rank=3, factor_dtype=torch.bfloat16)
    p = c.compress(x, torch.Generator().manual_seed(0))
    assert p.sent["p"].dtype == p.sent["q"].dtype == torch.bfloat16
    ref = p.sent["p"].double() @ p.sent["q"].double().T
    out = c.decompress(p)
    assert out.dtype == torch.float32
    assert torch.allclose(out.double(), ref, rtol=1e-6, atol=1e-7)


def test_lm_bits_names_and_bytes_of_the_tiny_lm():
    c = L.make_compressor("lowrank1-bf16+int8")
    assert isinstance(c, LowRank) and c.rank == 1 and c.factor_dtype == torch.bfloat16
    assert isinstance(c.fallback, Int8Absmax)
    assert isinstance(L.make_compressor("lowrank2").fallback, Identity)
    model = L.TinyLM(16, 8, 48)
    total = 0
    for prm in model.parameters():
        total += c.bits_sent(c.compress(prm.detach(), torch.Generator().manual_seed(0)))
    # emb 16x8, fc 48x16, out 16x48 at rank 1 in 16 bits; biases 48 and 16 as int8 + a scale.
    assert total == 16 * ((16 + 8) + (48 + 16) + (16 + 48)) + (8 * 48 + 32) + (8 * 16 + 32)
    assert total == 3008


def test_error_feedback_identity_and_telescoping(gen):
    ef = ErrorFeedback(LowRank(rank=1))
    eps = torch.finfo(torch.float64).eps / 2
    total_sent = torch.zeros(6, 9, dtype=torch.float64)
    total_in = torch.zeros(6, 9, dtype=torch.float64)
    for t in range(8):
        u = torch.randn(6, 9, generator=gen, dtype=torch.float64)
        v = ef.errors.get("w", torch.zeros_like(u)) + u
        sent = ef.send("w", u, torch.Generator().manual_seed(t))
        e = ef.errors["w"]
        assert torch.equal(e, v - sent.tensor)
        assert torch.all((sent.tensor + e - v).abs() <= 2 * eps * (e.abs() + v.abs()))
        total_sent += sent.tensor
        total_in += u
    # sum of sent == sum of inputs - final error (to rounding accumulated over 8 rounds)
    assert torch.allclose(total_sent, total_in - ef.errors["w"], atol=1e-13)
    assert "q" in ef.states["w"] and ef.states["w"]["q"].shape == (9, 1)


def test_error_feedback_removes_the_low_rank_bias(gen):
    # Inputs u_t = A + noise with A of rank 4, sent at rank 1. Without error feedback the time
    # average of what is sent stays a rank-1 summary of A (error >= the SVD tail of A); with it,
    # sum(sent) = sum(u) - e_T, so the average approaches A.
    a, _ = _with_spectrum(gen, 10, 8, [4.0, 3.0, 2.0, 1.5])
    tail = float((a - _best_rank(a, 1)).norm())
    T = 400
    avgs = {}
    for enabled in (True, False):
        ef = ErrorFeedback(LowRank(rank=1), enabled=enabled)
        g = torch.Generator().manual_seed(7)
        total = torch.zeros_like(a)
        for t in range(T):
            u = a + 0.3 * torch.randn(10, 8, generator=g, dtype=torch.float64)
            total += ef.send(0, u, torch.Generator().manual_seed(t)).tensor
        avgs[enabled] = total / T
    noise_floor = 0.3 * math.sqrt(80 / T)  # the std of the averaged noise, in Frobenius norm
    assert float((avgs[True] - a).norm()) < 0.1 * tail
    assert float((avgs[True] - a).norm()) < 3 * noise_floor + 0.05 * tail
    assert float((avgs[False] - a).norm()) > 0.7 * tail


def test_error_feedback_state_round_trip_keeps_the_warm_start(gen):
    us = [torch.randn(7, 5, generator=gen, dtype=torch.float64) for _ in range(6)]
    a = ErrorFeedback(LowRank(rank=2))
    for t in range(3):
        a.send(0, us[t], torch.Generator().manual_seed(t))
    saved = copy.deepcopy(a.state_dict())
    b = ErrorFeedback(LowRank(rank=2))
    b.load_state_dict(saved)
    for t in range(3, 6):
        sa = a.send(0, us[t], torch.Generator().manual_seed(t))
        sb = b.send(0, us[t], torch.Generator().manual_seed(t))
        assert torch.equal(sa.tensor, sb.tensor)
    # an old checkpoint without "states" still loads
    c = ErrorFeedback(LowRank(rank=2))
    c.load_state_dict({"errors": {}, "enabled": True})
    assert c.states == {}


def test_diloco_with_lowrank_checkpoint_round_trip():
    torch.manual_seed(0)
    make = lambda: torch.nn.Sequential(  # noqa: E731
        torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)
    ).double()
    x = torch.randn(4, 8, 6, dtype=torch.float64)
    y = torch.randn(4, 8, 3, dtype=torch.float64)

    def loss(m, w, r, h):
        return ((m(x[w]) - y[w]) ** 2).mean() * (1 + 0.1 * ((r + h) % 3))

    kw = {
        "inner": lambda p: torch.optim.SGD(p, lr=0.05),
        "outer": lambda p: torch.optim.SGD(p, lr=0.7, momentum=0.9, nesterov=True),
        "inner_steps": 3,
        "num_workers": 2,
        "compressor": LowRank(rank=1, fallback=ScaledSign()),
    }
    torch.manual_seed(1)
    a = DiLoCo(make(), **kw)
    for _ in range(3):
        a.round(loss)
    ckpt = copy.deepcopy(a.state_dict())
    for _ in range(3):
        a.round(loss)
    torch.manual_seed(2)
    b = DiLoCo(make(), **kw)
    b.load_state_dict(ckpt)
    for _ in range(3):
        b.round(loss)
    assert all(
        torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True)
    )
    assert a.history == b.history
    assert 0 < a.history[-1]["alpha"] < 1
    # bits per round: two workers x (rank 1 of 5x6 and 3x5 in float64 + two sign vectors)
    assert a.history[-1]["bits"] == 2 * (64 * (11 + 8) + (5 + 64) + (3 + 64))


def test_efsgd_with_lowrank_state_round_trip(gen):
    A = torch.randn(30, 8, generator=gen, dtype=torch.float64)
    B = torch.randn(30, 4, generator=gen, dtype=torch.float64)
    x0 = torch.randn(8, 4, generator=gen, dtype=torch.float64)

    def run(w, opt, n):
        for _ in range(n):
            opt.zero_grad()
            (0.5 * ((A @ w - B) ** 2).mean()).backward()
            opt.step()

    w1 = torch.nn.Parameter(x0.clone())
    o1 = EFSGD([w1], lr=0.5, compressor=LowRank(rank=1), seed=3)
    run(w1, o1, 5)
    saved_w, saved = w1.detach().clone(), copy.deepcopy(o1.state_dict())
    run(w1, o1, 5)
    w2 = torch.nn.Parameter(saved_w)
    o2 = EFSGD([w2], lr=0.5, compressor=LowRank(rank=1), seed=3)
    o2.load_state_dict(saved)
    run(w2, o2, 5)
    assert torch.equal(w1.detach(), w2.detach())
    assert 0 < o1.last_alpha < 1


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"rank": 0}, "rank"),
        ({"rank": 1.5}, "rank"),
        ({"rank": True}, "rank"),
        ({"rank": 1, "power_iterations": 0}, "power_iterations"),
        ({"rank": 1, "fallback": RandomK(k=1)}, "fallback"),
        ({"rank": 1, "fallback": LowRank(rank=1)}, "fallback"),
        ({"rank": 1, "fallback": "sign"}, "fallback"),
        ({"rank": 1, "factor_dtype": torch.int8}, "factor_dtype"),
    ],
)
def test_bad_lowrank_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        LowRank(**kw)


def test_integer_input_refused_and_absmax_fallback(gen):
    with pytest.raises(ValueError, match="floating"):
        LowRank(rank=1).compress(torch.arange(6).reshape(2, 3))
    c = LowRank(rank=1, fallback=AbsmaxQuant(bits=4))
    v = torch.randn(11, generator=gen)
    assert torch.equal(c(v), AbsmaxQuant(bits=4)(v))


def test_spectra_diagnostic_against_constructed_spectrum_and_tiny_run(gen):
    from diloco_ef.experiments import lm_bits_spectra as S

    mat, _ = _with_spectrum(gen, 9, 6, [3.0, 2.0, 1.0])
    got = S.energy_shares(mat, (1, 2, 4))
    assert got[1] == pytest.approx(9 / 14) and got[2] == pytest.approx(13 / 14)
    assert got[4] == pytest.approx(1.0)
    tiny = L.Config(vocab=5, embed=3, hidden=7, workers=2, steps=8, batch=4, tokens=101, heldout=51)
    recs = S.spectra(tiny, seed=0, inner_steps=4)
    assert [r["round"] for r in recs] == [0, 1]
    for r in recs:
        for key in ("emb.weight", "fc.weight", "out.weight"):
            shares = r[key]["worker0"]
            assert 0 < shares[1] <= shares[2] <= shares[4] <= 1 + 1e-12
            assert 0 < r[key]["sign_alpha"] <= 1
