"""StableCrossEntropy: torch's loss bit for bit, torch's gradient outside the fixed rows."""

import math
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F

from nfi.floats import FLOAT_DTYPES, unit_roundoff
from nfi.loss import StableCrossEntropy, stable_cross_entropy
from nfi.thresholds import absorbed_rows


def logits_mixed(N, C, dtype, seed):
    """Rows from uncertain to deeply absorbed (effective gaps 0..45), awkward sizes."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(N, C, generator=g, dtype=torch.float64)
    y = torch.randint(0, C, (N,), generator=g)
    z[torch.arange(N), y] += torch.linspace(-2, 45, N, dtype=torch.float64)
    return z.to(dtype), y


def both(z, y, **kw):
    a = z.clone().requires_grad_(True)
    b = z.clone().requires_grad_(True)
    la = F.cross_entropy(a, y, **kw)
    lb = stable_cross_entropy(b, y, **kw)
    go = torch.rand(la.shape, generator=torch.Generator().manual_seed(5)).to(z.dtype) + 0.5
    la.backward(go)
    lb.backward(go)
    return la, lb, a.grad, b.grad


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_loss_bitwise_and_gradient_bitwise_outside_confident_rows(dtype, reduction):
    z, y = logits_mixed(53, 13, dtype, seed=1)
    y[[4, 17]] = -100
    la, lb, ga, gb = both(z, y, reduction=reduction)
    assert torch.equal(la, lb)
    logp = torch.log_softmax(z.double(), 1).gather(1, y.clamp_min(0)[:, None]).squeeze(1)
    confident = (logp > -math.log(2)) & (y >= 0)
    assert torch.equal(ga[~confident], gb[~confident])
    # the non-target entries are torch's everywhere
    mask = torch.ones_like(ga, dtype=torch.bool)
    mask[torch.arange(53), y.clamp_min(0)] = y < 0
    assert torch.equal(ga[mask], gb[mask])
    assert confident.sum() > 10 and (~confident).sum() > 3


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_rows_sum_to_zero_up_to_one_rounding(dtype):
    z, y = logits_mixed(41, 9, dtype, seed=2)
    _, _, ga, gb = both(z, y, reduction="sum")
    logp = torch.log_softmax(z.double(), 1).gather(1, y[:, None]).squeeze(1)
    u = Fraction(unit_roundoff(dtype))
    n_absorbed_torch = 0
    for i in range(41):
        if logp[i] <= -math.log(2):
            continue
        row = [Fraction(v) for v in gb[i].double().tolist()]
        others = sum(row) - row[y[i]]
        # g_y = -fl(others): |exact row sum| <= u |others| (+ the row sum's error, ~C u_acc of
        # the row's mass 2|others|; accumulator float32 for bf16/fp16, the dtype otherwise)
        u_acc = Fraction(2.0**-24) if dtype in (torch.bfloat16, torch.float16) else u
        bound = (u + 2 * 2 * 9 * u_acc) * abs(others)
        assert abs(sum(row)) <= bound
        # torch's row sum in the absorbed rows is the whole of `others`
        trow = [Fraction(v) for v in ga[i].double().tolist()]
        if trow[y[i]] == 0 and others != 0:
            n_absorbed_torch += 1
            assert sum(trow) == sum(trow) - trow[y[i]] > 0
    assert n_absorbed_torch > 0


def test_confident_target_entry_is_accurate_where_torch_is_not():
    # fp32, upstream gradient 1: reference -(sum of the other softmax entries) in float64
    z, y = logits_mixed(67, 11, torch.float32, seed=3)
    a = z.clone().requires_grad_(True)
    b = z.clone().requires_grad_(True)
    F.cross_entropy(a, y, reduction="sum").backward()
    stable_cross_entropy(b, y, reduction="sum").backward()
    p = torch.softmax(z.double(), 1)
    ref = -p.scatter(1, y[:, None], 0.0).sum(1)
    logp = torch.log_softmax(z.double(), 1).gather(1, y[:, None]).squeeze(1)
    conf = logp > -math.log(2)
    ours = b.grad.gather(1, y[:, None]).squeeze(1).double()
    theirs = a.grad.gather(1, y[:, None]).squeeze(1).double()
    u = unit_roundoff(torch.float32)
    # each other entry w p_j carries a few u relative error (exp of a rounded logit difference
    # whose absolute error is u |z|max): relative error of the sum <= (4 + 2 |z|max) u
    rel = (4 + 2 * z.abs().max().item()) * u
    err_ours = ((ours - ref).abs() / ref.abs())[conf]
    err_theirs = ((theirs - ref).abs() / ref.abs())[conf]
    assert (err_ours <= rel).all()
    assert err_theirs.max() >= 1.0  # torch's is 100 % off in the absorbed rows
    # and outside the confident rows torch's and ours are the same numbers
    assert torch.equal(a.grad[~conf], b.grad[~conf])


def test_absorbed_mode_only_touches_absorbed_rows():
    z, y = logits_mixed(60, 7, torch.float32, seed=4)
    a = z.clone().requires_grad_(True)
    b = z.clone().requires_grad_(True)
    F.cross_entropy(a, y).backward()
    stable_cross_entropy(b, y, mode="absorbed").backward()
    rows = absorbed_rows(a.grad, y)
    assert 0 < rows.sum() < 60
    assert torch.equal(a.grad[~rows], b.grad[~rows])
    gy = b.grad[rows].gather(1, y[rows][:, None]).squeeze(1)
    assert (gy < 0).all()
    others = b.grad[rows].scatter(1, y[rows][:, None], 0.0).double().sum(1)
    # g_y = -(torch's fp32 row sum of the others), rounded once: within half an ulp plus the
    # summation error, C u of the others' sum (all entries are positive here)
    err = (gy.double() + others).abs()
    assert (err <= (2.0**-24 + 7 * 2.0**-24) * others.abs()).all()


def test_multidim_targets_like_torch():
    g = torch.Generator().manual_seed(6)
    z = (torch.randn(3, 5, 4, 2, generator=g) * 20).requires_grad_(True)
    y = torch.randint(0, 5, (3, 4, 2), generator=g)
    y[0, 1, 1] = -100
    for reduction in ("mean", "none"):
        ref = F.cross_entropy(z, y, reduction=reduction)
        out = stable_cross_entropy(z, y, reduction=reduction)
        assert out.shape == ref.shape
        assert torch.equal(out, ref)
    ga = torch.autograd.grad(F.cross_entropy(z * 0.1, y), z)[0]
    gb = torch.autograd.grad(stable_cross_entropy(z * 0.1, y), z)[0]
    torch.testing.assert_close(ga, gb)  # small logits: no confident rows differ by much


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(8)
    z = torch.randn(5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.tensor([0, 3, 1, -100, 2])
    for reduction in ("mean", "sum", "none"):
        assert torch.autograd.gradcheck(
            lambda x, r=reduction: stable_cross_entropy(x, y, reduction=r), (z,)
        )


def test_all_ignored_mean_is_nan_like_torch():
    z = torch.randn(3, 4, requires_grad=True)
    y = torch.full((3,), -100)
    ref = F.cross_entropy(z, y)
    out = stable_cross_entropy(z, y)
    assert math.isnan(ref.item()) and math.isnan(out.item())


def test_deterministic():
    z, y = logits_mixed(33, 6, torch.float32, seed=9)
    grads = []
    for _ in range(2):
        x = z.clone().requires_grad_(True)
        stable_cross_entropy(x, y).backward()
        grads.append(x.grad)
    assert torch.equal(grads[0], grads[1])


def test_module_matches_function():
    z, y = logits_mixed(10, 4, torch.float32, seed=10)
    crit = StableCrossEntropy(reduction="sum")
    assert "reduction='sum'" in repr(crit)
    assert torch.equal(crit(z, y), stable_cross_entropy(z, y, reduction="sum"))


def test_bad_inputs():
    z = torch.randn(4, 3)
    y = torch.tensor([0, 1, 2, 1])
    with pytest.raises(TypeError, match="floating"):
        stable_cross_entropy(z.long(), y)
    with pytest.raises(TypeError, match="integer"):
        stable_cross_entropy(z, y.float())
    with pytest.raises(ValueError, match="out of range"):
        stable_cross_entropy(z, torch.tensor([0, 1, 3, 1]))
    with pytest.raises(ValueError, match="out of range"):
        stable_cross_entropy(z, torch.tensor([0, -1, 2, 1]))
    with pytest.raises(ValueError, match="empty batch"):
        stable_cross_entropy(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long))
    with pytest.raises(ValueError, match="target shape"):
        stable_cross_entropy(z, y[:3])
    with pytest.raises(ValueError, match="shape"):
        stable_cross_entropy(torch.randn(3), torch.tensor(0))
    with pytest.raises(ValueError, match="2 classes"):
        stable_cross_entropy(torch.randn(4, 1), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="reduction"):
        stable_cross_entropy(z, y, reduction="avg")
    with pytest.raises(ValueError, match="mode"):
        StableCrossEntropy(mode="always")
    with pytest.raises(TypeError, match="ignore_index"):
        stable_cross_entropy(z, y, ignore_index=1.5)
