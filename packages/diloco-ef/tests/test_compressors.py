"""Compressors against brute force, closed forms and Monte-Carlo expectations."""

import math

import pytest
import torch

from diloco_ef.compressors import (
    QSGD,
    AbsmaxQuant,
    ApproxTopK,
    Identity,
    Int8Absmax,
    RandomK,
    ScaledSign,
    TopK,
    contraction,
    index_bits,
    qsgd_expected_alpha,
    topk_recall,
)


def _gens(n, seed=0):
    return [torch.Generator().manual_seed(seed * 100003 + i) for i in range(n)]


def test_identity_roundtrip_and_bits(gen):
    x = torch.randn(3, 7, generator=gen, dtype=torch.float64)
    c = Identity()
    p = c.compress(x)
    assert torch.equal(c.decompress(p), x)
    assert c.bits_sent(p) == 21 * 64
    assert contraction(x, c(x)) == 1.0


@pytest.mark.parametrize(("d", "k"), [(1, 1), (17, 1), (17, 5), (101, 100), (64, 64)])
def test_topk_equals_brute_force_sort(gen, d, k):
    x = torch.randn(d, generator=gen, dtype=torch.float64)
    c = TopK(k=k)
    out = c(x)
    # Brute force: sort magnitudes in Python, keep the k largest.
    order = sorted(range(d), key=lambda i: -abs(float(x[i])))[:k]
    ref = torch.zeros_like(x)
    ref[order] = x[order]
    assert torch.equal(out, ref)
    p = c.compress(x)
    # k fixed-width indices, or a d-bit bitmap when shorter ((17, 5): 25 > 17; (101, 100))
    assert c.bits_sent(p) == k * 64 + min(k * max(1, math.ceil(math.log2(d))), d)
    # Top-k closed form: alpha is the kept energy fraction, and at least k/d.
    alpha = contraction(x, out)
    assert alpha == pytest.approx(float(ref.pow(2).sum() / x.pow(2).sum()), rel=1e-12)
    assert alpha >= k / d - 1e-12


def test_topk_ratio_keeps_shape(gen):
    x = torch.randn(4, 5, 3, generator=gen)
    c = TopK(ratio=0.1)
    out = c(x)
    assert out.shape == x.shape and int((out != 0).sum()) == 6


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: TopK(k=0), "k must be"),
        (lambda: TopK(k=-3), "k must be"),
        (lambda: TopK(ratio=0.0), "ratio must"),
        (lambda: TopK(ratio=1.5), "ratio must"),
        (lambda: TopK(), "exactly one"),
        (lambda: TopK(k=2, ratio=0.1), "exactly one"),
        (lambda: RandomK(k=True), "k must be"),
        (lambda: ApproxTopK(k=3, sample_size=0), "sample_size"),
        (lambda: ApproxTopK(k=3, slack=-0.1), "slack"),
    ],
)
def test_bad_sparsifier_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("cls", [TopK, RandomK, ApproxTopK])
def test_k_out_of_range_names_k(cls):
    with pytest.raises(ValueError, match="k=8 is out of range for a tensor of 7"):
        cls(k=8).compress(torch.ones(7))


@pytest.mark.parametrize("bits", [0, -1, 32, 2.5, True])
def test_bad_bits(bits):
    with pytest.raises(ValueError, match="bits"):
        QSGD(bits=bits)


def test_integer_input_refused():
    with pytest.raises(ValueError, match="floating"):
        TopK(k=1).compress(torch.arange(4))


def test_index_bits():
    assert [index_bits(d) for d in (1, 2, 3, 4, 5, 1 << 20, (1 << 20) + 1)] == [
        1,
        1,
        2,
        2,
        3,
        20,
        21,
    ]
    with pytest.raises(ValueError, match="d must be"):
        index_bits(0)


def test_randomk_bits_have_no_indices_and_choice_is_shared(gen):
    x = torch.randn(1000, generator=gen)
    y = torch.randn(1000, generator=gen)
    c = RandomK(k=37)
    px = c.compress(x, torch.Generator().manual_seed(5))
    py = c.compress(y, torch.Generator().manual_seed(5))
    assert c.bits_sent(px) == 37 * 32
    assert list(px.sent) == ["values"]
    assert torch.equal(px.derived["indices"], py.derived["indices"])
    assert len(set(px.derived["indices"].tolist())) == 37


def test_randomk_expected_alpha_is_k_over_d(gen):
    d, k, n = 50, 10, 4000
    x = torch.randn(d, generator=gen, dtype=torch.float64)
    c = RandomK(k=k)
    alphas = torch.tensor([contraction(x, c(x, g)) for g in _gens(n)], dtype=torch.float64)
    se = float(alphas.std()) / math.sqrt(n)
    assert abs(float(alphas.mean()) - k / d) < 4 * se


def test_scaled_randomk_is_unbiased(gen):
    d, k, n = 20, 3, 6000
    x = torch.randn(d, generator=gen, dtype=torch.float64)
    c = RandomK(k=k, scaled=True)
    samples = torch.stack([c(x, g) for g in _gens(n, seed=1)])
    mean, se = samples.mean(0), samples.std(0) / math.sqrt(n)
    assert torch.all((mean - x).abs() < 4.5 * se)


@pytest.mark.parametrize("bits", [1, 2, 4])
def test_qsgd_unbiased_and_alpha_closed_form(gen, bits):
    d, n = 30, 4000
    x = torch.randn(d, generator=gen, dtype=torch.float64)
    c = QSGD(bits=bits)
    outs = torch.stack([c(x, g) for g in _gens(n, seed=bits)])
    mean, se = outs.mean(0), outs.std(0) / math.sqrt(n)
    # Coordinates that land exactly on a level have zero variance; guard with a tiny floor.
    assert torch.all((mean - x).abs() <= 4.5 * se + 1e-12)
    alphas = torch.tensor([contraction(x, o) for o in outs], dtype=torch.float64)
    expected = qsgd_expected_alpha(x, c.levels)
    assert abs(float(alphas.mean()) - expected) < 4.5 * float(alphas.std()) / math.sqrt(n)
    # The variance bound omega that makes the scaled variant contractive.
    assert 1 - expected <= c.omega(d) + 1e-12


def test_qsgd_levels_and_bits(gen):
    x = torch.randn(11, generator=gen)
    c = QSGD(bits=3)
    p = c.compress(x, gen)
    q = p.sent["levels"]
    assert q.dtype == torch.int8 and int(q.abs().max()) <= 7
    assert c.bits_sent(p) == 11 * 4 + 32
    # Each level is floor or ceil of s|x|/||x||.
    r = x.abs() / x.norm() * 7
    diff = q.abs().float() - torch.floor(r)
    assert torch.all((diff == 0) | (diff == 1))
    assert torch.equal(c(torch.zeros(5), gen), torch.zeros(5))


def test_contractive_qsgd_alpha_bound(gen):
    d, n = 64, 3000
    x = torch.randn(d, generator=gen, dtype=torch.float64)
    c = QSGD(bits=1, contractive=True)
    alphas = torch.tensor([contraction(x, c(x, g)) for g in _gens(n, seed=9)], dtype=torch.float64)
    delta = 1 / (1 + c.omega(d))
    assert float(alphas.mean()) >= delta - 4 * float(alphas.std()) / math.sqrt(n)
    # The unscaled 1-bit QSGD on 64 coordinates is not contractive in expectation here.
    raw = QSGD(bits=1)
    raw_alpha = qsgd_expected_alpha(x, raw.levels)
    assert raw_alpha < float(alphas.mean())


def test_int8_absmax_against_float64_reference(gen):
    x = torch.randn(257, generator=gen)
    x[3] = 0.0
    c = Int8Absmax()
    p = c.compress(x)
    assert c.bits_sent(p) == 257 * 8 + 32
    xd = x.double()
    scale = xd.abs().max() / 127
    ref = torch.round(xd / scale) * scale
    out = c.decompress(p)
    torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=1e-7)
    assert float((out.double() - xd).abs().max()) <= float(scale) / 2 * (1 + 1e-5)
    assert out[3] == 0 and int(p.sent["q"].abs().max()) == 127
    assert torch.equal(c(torch.zeros(4)), torch.zeros(4))


def test_approx_topk_exact_on_distinct_values(gen):
    x = torch.randn(20001, generator=gen)
    k = 150
    c = ApproxTopK(k=k, sample_size=2048)
    p = c.compress(x, gen)
    assert p.sent["indices"].numel() == k
    assert topk_recall(x, p.sent["indices"], k) == 1.0
    assert torch.equal(c.decompress(p), TopK(k=k)(x))
    assert c.fallbacks == 0
    assert c.bits_sent(p) == TopK(k=k).bits_sent(TopK(k=k).compress(x))


def test_approx_topk_falls_back_when_sample_underestimates(gen):
    x = torch.randn(5000, generator=gen)
    c = ApproxTopK(k=50, sample_size=100, slack=0.0)
    recalls = []
    for g in _gens(40, seed=3):
        p = c.compress(x, g)
        recalls.append(topk_recall(x, p.sent["indices"], 50))
    # Without slack the sample under-shoots about half the time; the fallback keeps it exact.
    assert c.fallbacks > 0
    assert recalls == [1.0] * 40


@pytest.mark.parametrize("nnz_over_k", [0.0, 0.37, 1.0, 1.13])
def test_approx_topk_mostly_zero_input_skips_the_zero_threshold(gen, monkeypatch, nnz_over_k):
    # Fewer nonzeros than (1 + slack) k: the sampled quantile is 0. The guard must select among
    # the nonzeros (never call the threshold pass with t = 0, which keeps all d entries) and
    # still return an exact top-k: the same kept magnitudes as a brute-force sort.
    import diloco_ef.compressors as C

    d, k = 30011, 173
    nnz = round(nnz_over_k * k)
    x = torch.zeros(d, dtype=torch.float64)
    where = torch.randperm(d, generator=gen)[:nnz]
    x[where] = torch.randn(nnz, generator=gen, dtype=torch.float64)
    thresholds = []
    real = C.threshold_select
    monkeypatch.setattr(C, "threshold_select", lambda a, t: thresholds.append(t) or real(a, t))
    c = ApproxTopK(k=k, sample_size=4096)
    p = c.compress(x, gen)
    idx = p.sent["indices"]
    assert thresholds == [] and c.fallbacks == 0
    assert idx.numel() == k and idx.unique().numel() == k
    kept = x[idx].abs().sort(descending=True).values
    torch.testing.assert_close(kept, x.abs().sort(descending=True).values[:k], rtol=0, atol=0)
    assert torch.equal(c.decompress(p), TopK(k=k)(x))  # when nnz <= k both equal x itself
    assert contraction(x, c.decompress(p)) == (1.0 if nnz <= k else contraction(x, TopK(k=k)(x)))


def test_approx_topk_unrefined_reports_recall(gen):
    x = torch.randn(30001, generator=gen)
    c = ApproxTopK(k=300, sample_size=4096, slack=0.2, refine=False)
    p = c.compress(x, gen)
    n = p.sent["indices"].numel()
    assert n >= 300 and n < 600
    assert topk_recall(x, p.sent["indices"], 300) == 1.0


def test_topk_recall_reference():
    x = torch.tensor([5.0, 1.0, -4.0, 0.5, 3.0])
    assert topk_recall(x, torch.tensor([0, 2, 4]), 3) == 1.0
    assert topk_recall(x, torch.tensor([1, 2, 3]), 3) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="k=6"):
        topk_recall(x, torch.tensor([0]), 6)


def test_contraction_reference():
    x = torch.tensor([3.0, 4.0])
    assert contraction(x, torch.tensor([3.0, 0.0])) == pytest.approx(9 / 25)
    assert contraction(torch.zeros(2), torch.zeros(2)) == 1.0
    with pytest.raises(ValueError, match="shapes differ"):
        contraction(x, torch.zeros(3))


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 8])
def test_absmax_quant_against_float64_reference(gen, bits):
    d = 389
    x = torch.randn(d, generator=gen)
    x[5] = 0.0
    c = AbsmaxQuant(bits=bits)
    p = c.compress(x)
    s = 2 ** (bits - 1) - 1
    assert c.levels == s and c.bits_sent(p) == d * bits + 32
    q = p.sent["q"]
    assert q.dtype == torch.int8 and int(q.abs().max()) == s  # the largest entry hits +-s
    xd = x.double()
    scale = xd.abs().max() / s
    # Brute force: the nearest of the 2s + 1 levels, by distance to every level.
    grid = torch.arange(-s, s + 1, dtype=torch.float64) * scale
    nearest = grid[(xd[:, None] - grid[None, :]).abs().argmin(dim=1)]
    out = c.decompress(p).double()
    torch.testing.assert_close(out, nearest, rtol=1e-6, atol=1e-7)
    err = (out - xd).abs()
    assert bool((err <= torch.minimum(scale / 2, xd.abs()) * (1 + 1e-5) + 1e-7).all())
    a = contraction(x, c(x))
    sq = float(xd.pow(2).sum())
    lower = max(float(xd.abs().max()) ** 2 / sq, 1 - d * float(scale) ** 2 / 4 / sq)
    assert lower - 1e-6 <= a < 1
    assert out[5] == 0 and torch.equal(c(torch.zeros(4)), torch.zeros(4))


def test_absmax_quant_8_bits_is_int8_absmax(gen):
    x = torch.randn(3, 101, generator=gen)
    assert torch.equal(AbsmaxQuant(bits=8)(x), Int8Absmax()(x))
    p8, pi = AbsmaxQuant(bits=8).compress(x), Int8Absmax().compress(x)
    assert torch.equal(p8.sent["q"], pi.sent["q"])
    assert AbsmaxQuant(bits=8).bits_sent(p8) == Int8Absmax().bits_sent(pi)


@pytest.mark.parametrize("bits", [0, 1, 9, 2.0, True])
def test_absmax_quant_rejects_bad_bits(bits):
    with pytest.raises(ValueError, match="bits"):
        AbsmaxQuant(bits=bits)


def test_scaled_sign_against_reference_and_closed_form_alpha(gen):
    d = 257
    x = torch.randn(d, generator=gen, dtype=torch.float64)
    x[7] = 0.0  # a zero is sent as +scale (one bit cannot say 0)
    c = ScaledSign()
    p = c.compress(x)
    assert c.bits_sent(p) == d + 64  # d sign bits and a float64 scale
    m = sum(abs(v) for v in x.tolist()) / d
    ref = torch.tensor([m if v >= 0 else -m for v in x.tolist()], dtype=torch.float64)
    out = c.decompress(p)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=0)
    l1, l2 = float(x.abs().sum()), float(x.pow(2).sum())
    assert contraction(x, out) == pytest.approx(l1**2 / (d * l2), rel=1e-10)
    # The scale minimises the error over all multiples of the sign vector.
    sign = ref / m

    def err(t):
        return float((t * sign - x).pow(2).sum())

    assert err(m) < err(m * 1.01) and err(m) < err(m * 0.99)
    assert torch.equal(c(torch.zeros(6, dtype=torch.float64)), torch.zeros(6, dtype=torch.float64))
    with pytest.raises(ValueError, match="floating"):
        c.compress(torch.ones(3, dtype=torch.int64))


def test_scaled_sign_alpha_extremes():
    c = ScaledSign()
    flat = torch.tensor([2.0, -2.0, 2.0, -2.0])  # equal magnitudes: lossless
    assert torch.equal(c(flat), flat) and contraction(flat, c(flat)) == 1.0
    spike = torch.zeros(64)
    spike[3] = 1.0  # one nonzero entry: alpha = 1/d
    assert contraction(spike, c(spike)) == pytest.approx(1 / 64)
