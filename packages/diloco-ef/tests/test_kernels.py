"""The Triton kernels (stochastic and int8 quantization, threshold selection) against their
references, on odd shapes under the interpreter."""

import math

import pytest
import torch

from diloco_ef import QSGD, Int8Absmax
from diloco_ef.kernels import (
    int8_quantize,
    int8_quantize_reference,
    int8_quantize_triton,
    stochastic_quantize,
    stochastic_quantize_reference,
    stochastic_quantize_triton,
    threshold_select,
    threshold_select_reference,
    threshold_select_triton,
)
from shared_core import kernels as K

needs_triton = pytest.mark.skipif(
    not (K.HAS_TRITON and (K.interpreting() or torch.cuda.is_available())),
    reason="needs Triton with a GPU or TRITON_INTERPRET=1",
)
DEV = "cuda" if torch.cuda.is_available() else "cpu"


@needs_triton
@pytest.mark.parametrize("shape", [(1,), (1025,), (3, 1001), (7, 13, 37)])
@pytest.mark.parametrize("levels", [1, 7, 255])
def test_triton_matches_reference_float32(gen, shape, levels):
    x = torch.randn(shape, generator=gen).to(DEV)
    u = torch.rand(shape, generator=gen).to(DEV)
    mult = levels / float(x.norm())
    out = stochastic_quantize_triton(x, u, mult, levels)
    ref = stochastic_quantize_reference(x, u, mult, levels)
    assert torch.equal(out, ref)
    assert float(out.abs().max()) <= levels


@needs_triton
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_triton_half_dtypes(gen, dtype):
    x = torch.randn(517, generator=gen).to(DEV, dtype)
    u = torch.rand(517, generator=gen).to(DEV, dtype)
    out = stochastic_quantize_triton(x, u, 3.0, 7)
    ref = stochastic_quantize_reference(x, u, 3.0, 7)
    assert out.dtype == dtype and torch.equal(out, ref)


@needs_triton
def test_triton_non_contiguous_and_zero(gen):
    x = torch.randn(33, 65, generator=gen).to(DEV).t()
    x[0, 0] = 0.0
    u = torch.rand(65, 33, generator=gen).to(DEV)
    out = stochastic_quantize_triton(x, u, 5.0, 15)
    assert torch.equal(out, stochastic_quantize_reference(x, u, 5.0, 15))
    assert out[0, 0] == 0


def test_reference_is_stochastic_rounding_by_hand():
    # r = 2.5 * |x|: 0.25 -> r=0.625, u=0.5 < 0.625 rounds up; -1.0 -> r=2.5, u=0.7 stays at 2;
    # 3.0 -> r=7.5 clamps at 3.
    x = torch.tensor([0.25, -1.0, 3.0], dtype=torch.float64)
    u = torch.tensor([0.5, 0.7, 0.0], dtype=torch.float64)
    assert stochastic_quantize_reference(x, u, 2.5, 3).tolist() == [1.0, -2.0, 3.0]


def test_op_dispatch_opcheck_and_validation(gen):
    x, u = torch.randn(5, 31, generator=gen), torch.rand(5, 31, generator=gen)
    assert torch.equal(
        torch.ops.diloco_ef.stochastic_quantize(x, u, 2.0, 3),
        stochastic_quantize_reference(x, u, 2.0, 3),
    )
    torch.library.opcheck(stochastic_quantize, (x, u, 2.0, 3))
    with pytest.raises(ValueError, match="one shape"):
        stochastic_quantize_reference(x, u[:, :3], 1.0, 1)
    with pytest.raises(ValueError, match="levels"):
        stochastic_quantize_reference(x, u, 1.0, 0)


def test_op_under_torch_compile(gen):
    x, u = torch.randn(17, 9, generator=gen), torch.rand(17, 9, generator=gen)
    f = torch.compile(lambda a, b: stochastic_quantize(a * 2.0, b, 1.5, 7) + 1.0, fullgraph=True)
    assert torch.equal(f(x, u), stochastic_quantize_reference(x * 2.0, u, 1.5, 7) + 1.0)


def test_qsgd_uses_the_op(gen):
    x = torch.randn(40, generator=gen)
    p = QSGD(bits=3).compress(x, torch.Generator().manual_seed(1))
    u = torch.rand(40, generator=torch.Generator().manual_seed(1))
    ref = stochastic_quantize_reference(x, u, 7 / float(x.norm()), 7)
    assert torch.equal(p.sent["levels"].float(), ref)


# --- int8 absmax quantization -------------------------------------------------------------


@needs_triton
@pytest.mark.parametrize("shape", [(1,), (1025,), (3, 1001), (7, 13, 37)])
def test_int8_triton_matches_reference(gen, shape):
    x = (torch.randn(shape, generator=gen) * 3).to(DEV)
    scale = float(x.abs().max()) / 127.0
    out = int8_quantize_triton(x, scale)
    assert out.dtype == torch.int8 and torch.equal(out, int8_quantize_reference(x, scale))
    # A smaller scale saturates: the clamp must match too.
    assert torch.equal(int8_quantize_triton(x, scale / 4), int8_quantize_reference(x, scale / 4))


@needs_triton
def test_int8_triton_rounds_half_to_even_and_half_dtypes(gen):
    ties = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -3.49, 3.51]).to(DEV)
    assert torch.equal(int8_quantize_triton(ties, 1.0), int8_quantize_reference(ties, 1.0))
    assert int8_quantize_triton(ties, 1.0).tolist() == [0, 2, 2, 0, -2, -2, 126, -3, 4]
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(517, generator=gen).to(DEV, dtype)
        s = float(x.abs().max().float()) / 127.0
        assert torch.equal(int8_quantize_triton(x, s), int8_quantize_reference(x, s))


@needs_triton
def test_int8_triton_non_contiguous(gen):
    x = torch.randn(33, 65, generator=gen).to(DEV).t()
    s = float(x.abs().max()) / 127.0
    assert torch.equal(int8_quantize_triton(x, s), int8_quantize_reference(x, s))


def test_int8_op_opcheck_validation_and_compressor(gen):
    x = torch.randn(5, 31, generator=gen, dtype=torch.float64)
    s = float(x.abs().max()) / 127.0

    # against a brute force in Python floats: the nearest integer, ties to the even one, clamped
    def nearest(y: float) -> int:
        lo = math.floor(y)
        d = y - lo
        r = lo + 1 if d > 0.5 or (d == 0.5 and lo % 2 == 1) else lo
        return max(-127, min(127, r))

    want = [nearest(v / s) for v in x.reshape(-1).tolist()]
    assert int8_quantize(x, s).reshape(-1).tolist() == want
    torch.library.opcheck(int8_quantize, (x.float(), s))
    with pytest.raises(ValueError, match="scale"):
        int8_quantize_reference(x, 0.0)
    xf = x.float()
    p = Int8Absmax().compress(xf)
    ref = int8_quantize_reference(xf, float(xf.abs().max() / 127.0))
    assert torch.equal(p.sent["q"], ref.reshape(-1))


# --- threshold selection for approximate Top-k ---------------------------------------------


@needs_triton
@pytest.mark.parametrize("shape", [(1,), (1023,), (3, 1001), (5, 13, 37)])
@pytest.mark.parametrize("frac", [0.0, 0.03, 0.5])
def test_threshold_triton_matches_reference(gen, shape, frac):
    x = torch.randn(shape, generator=gen).to(DEV)
    a = x.abs().reshape(-1)
    rank = max(1, int((1 - frac) * a.numel()))
    t = float(torch.kthvalue(a.cpu(), rank).values) if frac else float(a.max()) + 1.0
    out = threshold_select_triton(x, t)
    ref = threshold_select_reference(x, t)
    assert out.dtype == torch.int64 and torch.equal(out, ref)
    assert torch.equal(out, torch.nonzero(a >= t).reshape(-1))  # independent: ascending set


@needs_triton
def test_threshold_triton_half_dtypes_and_non_contiguous(gen):
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(2049, generator=gen).to(DEV, dtype)
        t = float(x.abs().float().median())
        assert torch.equal(threshold_select_triton(x, t), threshold_select_reference(x, t))
    y = torch.randn(33, 65, generator=gen).to(DEV).t()
    t = float(y.abs().median())
    assert torch.equal(threshold_select_triton(y, t), threshold_select_reference(y, t))


def test_threshold_op_opcheck_and_approx_topk_uses_it(gen, monkeypatch):
    x = torch.randn(7, 19, generator=gen)
    torch.library.opcheck(threshold_select, (x, 0.5))
    with pytest.raises(ValueError, match="floating"):
        threshold_select_reference(torch.arange(4), 1.0)
    import diloco_ef.compressors as C

    calls = []

    def spy(a, t):
        calls.append(t)
        return threshold_select(a, t)

    monkeypatch.setattr(C, "threshold_select", spy)
    big = torch.randn(5001, generator=gen)
    c = C.ApproxTopK(k=50, sample_size=500)
    p = c.compress(big, torch.Generator().manual_seed(0))
    assert calls and c.fallbacks == 0
    exact = torch.topk(big.abs(), 50).indices
    assert set(p.sent["indices"].tolist()) == set(exact.tolist())
