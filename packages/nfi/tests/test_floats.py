"""Absorption rule of nfi.floats against exact rational rounding and against torch's adds."""

import math
import random
from fractions import Fraction

import pytest
import torch

from nfi.floats import (
    FLOAT_DTYPES,
    absorbed_update_mask,
    absorbs,
    absorption_limits,
    significand_bits,
    unit_roundoff,
)


def round_fraction(q: Fraction, t: int) -> Fraction:
    """Round-to-nearest-even of an exact rational to ``t`` significand bits (normal range)."""
    if q == 0:
        return q
    sign = -1 if q < 0 else 1
    a = abs(q)
    e = math.floor(math.log2(a))
    # fix floor(log2) for rationals close to powers of two
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    scale = Fraction(2) ** (e - t + 1)
    m = a / scale  # in [2^(t-1), 2^t)
    lo = math.floor(m)
    frac = m - lo
    if frac > Fraction(1, 2) or (frac == Fraction(1, 2) and lo % 2 == 1):
        lo += 1
    return sign * lo * scale


def random_representable(dtype, rng):
    x = rng.uniform(-1, 1) * 2.0 ** rng.randint(-6, 6)
    return torch.tensor(x, dtype=torch.float64).to(dtype).double().item()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_unit_roundoff_is_largest_absorbed_addend_of_one(dtype):
    u = unit_roundoff(dtype)
    assert u == 2.0 ** -significand_bits(dtype)
    one = torch.tensor(1.0, dtype=dtype)
    assert one + torch.tensor(u, dtype=dtype) == one  # tie goes to the even 1
    assert one + torch.tensor(2 * u, dtype=dtype) != one
    assert u == torch.finfo(dtype).eps / 2


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_absorbs_matches_exact_rational_rounding(dtype):
    rng = random.Random(7)
    t = significand_bits(dtype)
    for _ in range(400):
        a = random_representable(dtype, rng)
        if a == 0:
            continue
        h_down, h_up, _ = absorption_limits(a, dtype)
        # addends around both half spacings, exact ties included
        h = rng.choice([h_down, h_up])
        b = h * rng.choice([0.5, 0.999, 1.0, 1.001, 2.0]) * rng.choice([-1.0, 1.0])
        exact = round_fraction(Fraction(a) + Fraction(b), t)
        assert absorbs(a, b, dtype) == (exact == Fraction(a)), (a, b)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_absorbs_matches_torch_addition(dtype):
    rng = random.Random(3)
    for _ in range(300):
        a = random_representable(dtype, rng)
        if a == 0:
            continue
        # b representable and not so small that the fp32 opmath of bf16/fp16 rounds twice
        b = random_representable(dtype, rng) * 2.0 ** rng.randint(-significand_bits(dtype) - 2, -1)
        b = torch.tensor(b, dtype=torch.float64).to(dtype).double().item()
        if b == 0 or abs(b) < abs(a) * 2.0**-20:
            continue
        ta, tb = torch.tensor(a, dtype=dtype), torch.tensor(b, dtype=dtype)
        assert absorbs(a, b, dtype) == bool(ta + tb == ta), (a, b)


def test_power_of_two_has_finer_spacing_below():
    h_down, h_up, tie = absorption_limits(1.0, torch.float32)
    assert (h_down, h_up, tie) == (2.0**-25, 2.0**-24, True)
    assert absorbs(1.0, -(2.0**-25), torch.float32)
    assert not absorbs(1.0, -(2.0**-24), torch.float32)
    assert absorbs(1.0, 2.0**-24, torch.float32)
    # odd significand: the tie goes away from a
    a = 1.0 + 2.0**-23
    assert not absorbs(a, 2.0**-24, torch.float32)
    assert absorbs(a, 2.0**-24 * 0.99, torch.float32)


def test_absorbed_update_mask_matches_scalar_rule():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(200, generator=g) * 10
    upd = torch.randn(200, generator=g) * 10.0 ** torch.randint(-9, -2, (200,), generator=g)
    mask = absorbed_update_mask(w, upd)
    for wi, ui, mi in zip(w.tolist(), upd.to(torch.float32).tolist(), mask.tolist(), strict=True):
        assert mi == absorbs(wi, ui, torch.float32)
    assert 0 < mask.sum() < 200  # both kinds occur: the test can fail either way


def test_bad_inputs():
    with pytest.raises(ValueError, match="dtype"):
        unit_roundoff(torch.int32)
    with pytest.raises(ValueError, match="not exactly representable"):
        absorbs(0.1, 1e-9, torch.bfloat16)
    with pytest.raises(ValueError, match="nonzero"):
        absorbs(0.0, 1.0, torch.float32)
    with pytest.raises(ValueError, match="finite"):
        absorbs(1.0, math.nan, torch.float32)
    with pytest.raises(ValueError, match="subnormal"):
        absorbs(2.0**-140, 2.0**-149, torch.float32)
    with pytest.raises(TypeError):
        absorbed_update_mask(torch.ones(2, dtype=torch.int64), torch.ones(2))
    with pytest.raises(ValueError, match="shape"):
        absorbed_update_mask(torch.ones(2), torch.ones(3))
