"""The SGD-to-Muon family against independent references (eigh, shared_core's SVD and LMOs)."""

from __future__ import annotations

import math

import pytest
import torch

from adaptive_lmo.fractional import fractional_update, schatten_p
from shared_core.lmo import schatten_lmo
from shared_core.polar import msign, spectral_power

# tolerances here follow an error model; `nox -s numerics` reruns them on every BLAS path
pytestmark = pytest.mark.numerics


def _rand(shape, seed, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _eigh_power(G: torch.Tensor, a: float) -> torch.Tensor:
    """G (G^T G)^((a-1)/2) through eigh: an independent route to U s^a V^T (full rank)."""
    w, Q = torch.linalg.eigh(G.mT @ G)
    return G @ (Q * w.pow((a - 1) / 2).unsqueeze(-2)) @ Q.mT


@pytest.mark.parametrize("shape", [(13, 7), (7, 13), (3, 9, 5)])
@pytest.mark.parametrize("a", [0.0, 0.3, 0.77, 1.0])
def test_matches_eigh_reference(shape, a):
    G = _rand(shape, 1)
    ref = _eigh_power(G.mT, a).mT if shape[-2] < shape[-1] else _eigh_power(G, a)
    out = fractional_update(G, a, scale="none")
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-10)


def test_corners_are_gradient_and_polar():
    G = _rand((11, 6), 2)
    assert torch.equal(fractional_update(G, 1.0, scale="none"), G)
    torch.testing.assert_close(fractional_update(G, 0.0), msign(G, method="svd"), rtol=0, atol=0)
    torch.testing.assert_close(fractional_update(G, 0.0, scale="none"), msign(G, method="svd"))


@pytest.mark.parametrize("a", [0.2, 0.5, 1.0])
def test_polar_scale_has_the_polar_norm_and_the_same_direction(a):
    G = _rand((9, 14), 3)
    out = fractional_update(G, a, scale="polar")
    assert float(out.norm()) == pytest.approx(math.sqrt(9), rel=1e-12)
    ref = spectral_power(G, a)  # shared_core: U diag((s/|G|_F)^a) V^T
    torch.testing.assert_close(out / out.norm(), ref / ref.norm(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("a", [0.25, 0.5, 0.9])
def test_is_the_schatten_lmo_direction(a):
    G = _rand((10, 8), 4)
    lmo = schatten_lmo(G, schatten_p(a), radius=1.0)  # -U diag(s^(q-1)/...) V^T, q = 1 + a
    out = fractional_update(G, a, scale="none")
    cos = float((out * -lmo).sum() / (out.norm() * lmo.norm()))
    assert cos == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("a", [0.1, 0.5, 0.8])
def test_iterative_route_matches_svd_in_float32(a):
    # condition number <= 100: Q1 diag(s) Q2^T with s in [1, 100]
    g = torch.Generator().manual_seed(5)
    Q1, _ = torch.linalg.qr(torch.randn(37, 23, generator=g, dtype=torch.float64))
    Q2, _ = torch.linalg.qr(torch.randn(23, 23, generator=g, dtype=torch.float64))
    s = torch.logspace(0, 2, 23, dtype=torch.float64)
    G = ((Q1 * s) @ Q2.T).float()
    for scale in ("none", "polar"):
        it = fractional_update(G, a, method="iterative", scale=scale)
        sv = fractional_update(G, a, method="svd", scale=scale)
        assert float((it - sv).norm() / sv.norm()) < 1e-3, scale


def test_batched_equals_one_at_a_time():
    G = _rand((4, 6, 9), 6)
    out = fractional_update(G, 0.4)
    for e in range(4):
        torch.testing.assert_close(out[e], fractional_update(G[e], 0.4))


def test_zero_and_rank_deficient_inputs():
    assert torch.equal(fractional_update(torch.zeros(5, 3), 0.5), torch.zeros(5, 3))
    # Polar scale = the norm of msign's polar factor (exact zeros stay zero, as in msign).
    G = torch.zeros(7, 4, dtype=torch.float64)
    G[:2] = _rand((2, 4), 7)  # rank 2 with exactly-zero rows
    for A in (G, _rand((7, 1), 7) @ _rand((1, 4), 8)):
        out = fractional_update(A, 0.5)
        want = float(msign(A, method="svd").norm())
        assert float(out.norm()) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("a", [-0.1, 1.5, float("nan"), "x", True])
def test_bad_exponent_raises(a):
    with pytest.raises(ValueError, match="must be"):
        fractional_update(_rand((3, 3), 0), a)


def test_bad_arguments_raise():
    G = _rand((3, 3), 0)
    with pytest.raises(ValueError, match="method"):
        fractional_update(G, 0.5, method="qr")
    with pytest.raises(ValueError, match="scale"):
        fractional_update(G, 0.5, scale="rms")
    with pytest.raises(ValueError, match="non-finite"):
        fractional_update(torch.full((3, 3), math.nan), 0.5)
    with pytest.raises(ValueError, match="shape"):
        fractional_update(torch.ones(3), 0.5)
