"""CE absorption thresholds: closed forms vs emulated summation orders vs torch's own CE."""

import math
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F

from nfi.floats import FLOAT_DTYPES, significand_bits, unit_roundoff
from nfi.thresholds import (
    absorbed_rows,
    effective_gap,
    gap_threshold,
    measure_gap_threshold,
    predicted_absorbed,
    threshold_bounds,
)

CLASSES = (2, 3, 10, 100, 1000)


def spacing_at(x: float, dtype) -> float:
    return 2.0 ** (math.frexp(x)[1] - significand_bits(dtype))


def bisect(pred, lo=0.5, hi=60.0, iters=80):
    """Smallest x in [lo, hi] with pred(x) true, for a monotone predicate (float64)."""
    assert not pred(lo) and pred(hi)
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if pred(mid) else (mid, hi)
    return hi


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("C", CLASSES)
def test_exact_order_closed_form_vs_emulated_single_rounding(dtype, C):
    # route 2: the exact rational 1 + (C-1) fl64(e^-Δ) rounded once to t bits (nearest-even):
    # it rounds to 1 iff its excess over 1 is <= u (torch's float64 -> bf16 cast rounds twice,
    # through float32, so it is not used here)
    u = Fraction(1, 2 ** significand_bits(dtype))

    def absorbed(d):
        return (C - 1) * Fraction(math.exp(-d)) <= u

    measured = bisect(absorbed)
    # exp(-d) carries ~1 ulp of float64 error: |Δ error| <= a few 1e-16 relative
    assert measured == pytest.approx(gap_threshold(dtype, C), abs=1e-12)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("C", [2, 10, 50])
def test_sequential_order_closed_form_vs_emulation_in_dtype(dtype, C):
    def absorbed(d):
        e = torch.tensor(math.exp(-d), dtype=dtype)
        s = torch.tensor(1.0, dtype=dtype)
        for _ in range(C - 1):
            s = s + e
        return s.item() == 1.0

    measured = bisect(absorbed)
    # the term e is rounded to the dtype first (relative error <= u, so Δ moves by <= u); the
    # bisection works on float64 Δ near 40 (spacing 7e-15) and exp adds ~1 ulp
    tol = 2 * unit_roundoff(dtype) + 2 * spacing_at(40.0, torch.float64)
    assert measured == pytest.approx(gap_threshold(dtype, C, "sequential"), abs=tol)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("C", CLASSES)
def test_torch_cross_entropy_threshold_within_order_bounds(dtype, C):
    if dtype is torch.float16 and C > 1000:
        pytest.skip("fp16 gradients of the other classes underflow")
    lo, hi = threshold_bounds(dtype, C)
    measured = measure_gap_threshold(dtype, C)
    # Δ is rounded up to the dtype's grid; partial sums of the C-1 small terms carry relative
    # error <= (C-1) u_acc (accumulator: fp32 for bf16/fp16, else the dtype itself).
    u_acc = unit_roundoff(torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype)
    slack = spacing_at(measured, dtype) + math.log1p((C - 1) * u_acc / unit_roundoff(dtype))
    assert lo - slack <= measured <= hi + slack
    if dtype in (torch.bfloat16, torch.float16):
        # one rounding of an fp32 sum: the exact-order (upper) closed form
        assert abs(measured - hi) <= slack


def test_issue_numbers_for_ten_classes_low_precision():
    # the issue measured with torch's CE on 10 classes on a 0.25 grid: bf16 7.75, fp16 10.0
    for dtype, expected in ((torch.bfloat16, 7.75), (torch.float16, 10.0)):
        assert math.ceil(measure_gap_threshold(dtype, 10) * 4) / 4 == expected
        assert math.ceil(gap_threshold(dtype, 10) * 4) / 4 == expected


@pytest.mark.parametrize("path", ["log_softmax_nll", "softmax_log"])
def test_every_torch_path_absorbs_in_fp32(path):
    lo, hi = threshold_bounds(torch.float32, 10)
    measured = measure_gap_threshold(torch.float32, 10, path)
    assert lo - 1e-5 <= measured <= hi + math.log(2) + 1e-5


def test_float64_loss_moves_threshold_to_float64():
    lo, hi = threshold_bounds(torch.float64, 10)
    assert lo - 1e-5 <= measure_gap_threshold(torch.float32, 10, "float64_loss") <= hi + 1e-4


def test_effective_gap_uniform_case_and_loss():
    z = torch.tensor([[9.0, 1.0, 1.0, 1.0], [0.0, 3.0, -1.0, 2.0]], dtype=torch.float64)
    y = torch.tensor([0, 1])
    gam = effective_gap(z, y)
    assert gam[0].item() == pytest.approx(8.0 - math.log(3), rel=1e-15)
    # loss = log(1 + e^-gamma): route 2 via torch's CE in float64
    ce = F.cross_entropy(z, y, reduction="none")
    # torch forms lse - z_y, a difference of O(max|z|) numbers: absolute error ~ 4 u max|z|
    atol = 4 * 2.0**-53 * z.abs().max().item()
    torch.testing.assert_close(torch.log1p(torch.exp(-gam)), ce, rtol=1e-14, atol=atol)


def test_predicted_absorption_matches_torch_bf16_rows():
    # bf16 CE on CPU rounds an fp32 sum once: the "exact" prediction applies row by row
    g = torch.Generator().manual_seed(1)
    N, C = 400, 7
    z = torch.randn(N, C, generator=g)
    y = torch.randint(0, C, (N,), generator=g)
    gap = torch.rand(N, generator=g) * 8 + 3
    z[torch.arange(N), y] += gap
    zb = z.to(torch.bfloat16).requires_grad_(True)
    F.cross_entropy(zb, y, reduction="sum").backward()
    torch_rows = absorbed_rows(zb.grad.float(), y)
    pred = predicted_absorbed(zb.detach(), y, torch.bfloat16)
    gam = effective_gap(zb.detach(), y)
    # rows far from the threshold (fp32 accumulation error, ~C u32 / u16 in Δ) must agree
    far = (gam + math.log(unit_roundoff(torch.bfloat16))).abs() > 1e-3
    assert torch.equal(torch_rows[far], pred[far])
    assert 0 < torch_rows.sum() < N
    # the sequential prediction is necessary: absorbed rows satisfy it
    seq = predicted_absorbed(zb.detach(), y, torch.bfloat16, order="sequential")
    assert bool((seq | ~torch_rows).all())


def test_absorbed_rows_without_and_with_target_agree():
    z = torch.zeros(3, 5)
    z[0, 2] = 30.0  # absorbed in fp32
    z[1, 1] = 5.0  # healthy
    z[2, 4] = 30.0  # absorbed
    z.requires_grad_(True)
    y = torch.tensor([2, 1, 4])
    F.cross_entropy(z, y).backward()
    assert absorbed_rows(z.grad).tolist() == [True, False, True]
    assert absorbed_rows(z.grad, y).tolist() == [True, False, True]
    assert absorbed_rows(z.grad, torch.tensor([2, 1, -100])).tolist() == [True, False, False]


def test_bad_inputs():
    with pytest.raises(ValueError, match="num_classes"):
        gap_threshold(torch.float32, 1)
    with pytest.raises(ValueError, match="num_classes"):
        gap_threshold(torch.float32, 2.5)
    with pytest.raises(ValueError, match="order"):
        gap_threshold(torch.float32, 10, "pairwise")
    with pytest.raises(ValueError, match="dtype"):
        gap_threshold(torch.int8, 10)
    with pytest.raises(ValueError, match="out of range"):
        effective_gap(torch.zeros(2, 3), torch.tensor([0, 3]))
    with pytest.raises(TypeError, match="floating"):
        effective_gap(torch.zeros(2, 3, dtype=torch.long), torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="integer"):
        effective_gap(torch.zeros(2, 3), torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="path"):
        measure_gap_threshold(torch.float32, 10, "fused")
    with pytest.raises(ValueError, match="grad_logits"):
        absorbed_rows(torch.zeros(3))
