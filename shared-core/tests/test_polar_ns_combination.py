"""Newton-Schulz iterate spectra and weighted sums of iterates, against float64 SVD references."""

import math

import numpy as np
import pytest
import torch

from shared_core.polar import (
    coefficients_for,
    newton_schulz,
    newton_schulz_combination,
    newton_schulz_spectra,
)

pytestmark = pytest.mark.numerics

MUON = [tuple(c) for c in coefficients_for("muon", 5)]
U64 = torch.finfo(torch.float64).eps / 2


def _lipschitz(coeffs):
    """max |p'(x)| over [0, 1.2] for every step's quintic: normalised singular values start
    in [0, 1] and Muon's quintics keep them in [0, 1.2] (checked on a fine grid)."""
    x = torch.linspace(0, 1.2, 12001, dtype=torch.float64)
    return max(
        (float((a + 3 * b * x**2 + 5 * c * x**4).abs().max()) for a, b, c in coeffs), default=1.0
    )


def _tol(coeffs, n, wsum=1.0):
    """Forward error of k float64 steps: each step's three products add <= n*u relative
    error (inner size <= n), later steps amplify it by at most the quintics' Lipschitz
    constant; the normalisation adds n*u; a weighted sum scales it by the weights' 1-norm."""
    k = len(coeffs)
    L = _lipschitz(coeffs)
    return 3 * n * U64 * (1 + k) * max(L, 1.0) ** k * wsum


def _svd_map(G, f):
    """U diag(f) V^T of G from numpy's float64 SVD (an oracle independent of torch)."""
    u, _, vt = np.linalg.svd(G.double().numpy(), full_matrices=False)
    return torch.from_numpy((u * f.numpy()[..., None, :]) @ vt)


def _rel(a, b):
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


@pytest.mark.parametrize("shape", [(37, 23), (23, 37), (3, 17, 29), (31, 31)])
@pytest.mark.parametrize("k", [0, 1, 3, 5])
def test_spectra_are_the_iterates(gen, shape, k):
    """Column k of newton_schulz_spectra is the k-step iterate's singular values, as maps:
    U diag(f_k(s)) V^T equals newton_schulz with the first k steps (float64)."""
    G = torch.randn(*shape, dtype=torch.float64, generator=gen)
    s = torch.linalg.svdvals(G)
    F = newton_schulz_spectra(s, MUON)
    assert F.shape == (*s.shape, 6) and F.dtype == torch.float64
    ref = _svd_map(G, F[..., k])
    if k == 0:
        got = G / torch.linalg.vector_norm(G, dim=(-2, -1), keepdim=True)
    else:
        got = newton_schulz(G, MUON[:k], dtype=torch.float64)
    assert _rel(got, ref) < _tol(MUON[:k], max(shape[-2:]))


@pytest.mark.parametrize("shape", [(41, 19), (19, 41), (2, 23, 30)])
def test_combination_is_the_fitted_spectral_map(gen, shape):
    """sum_k w_k X_k = U diag(sum_k w_k f_k(s)) V^T for random weights of both signs."""
    G = torch.randn(*shape, dtype=torch.float64, generator=gen)
    w = torch.randn(6, dtype=torch.float64, generator=gen)
    s = torch.linalg.svdvals(G)
    ref = _svd_map(G, newton_schulz_spectra(s, MUON) @ w)
    got = newton_schulz_combination(G, MUON, w.tolist(), dtype=torch.float64)
    assert got.shape == G.shape and got.dtype == torch.float64
    tol = _tol(MUON, max(shape[-2:]), float(w.abs().sum()))
    assert _rel(got, ref) < tol
    # the tensor-weight path is the same sum, summed by other kernels
    assert _rel(newton_schulz_combination(G, MUON, w, dtype=torch.float64), got) < tol


def test_batched_weights_act_per_matrix(gen):
    G = torch.randn(3, 13, 21, dtype=torch.float64, generator=gen)
    W = torch.randn(3, 6, dtype=torch.float64, generator=gen)
    got = newton_schulz_combination(G, MUON, W, dtype=torch.float64)
    for i in range(3):
        one = newton_schulz_combination(G[i], MUON, W[i].tolist(), dtype=torch.float64)
        assert _rel(got[i], one) < _tol(MUON, 21, float(W[i].abs().sum()))


def test_last_unit_weight_is_newton_schulz_exactly(gen):
    """A unit weight on the last iterate runs the same ops as newton_schulz (float32 sums of
    zeros are exact), so the two agree bit for bit."""
    G = torch.randn(29, 45, generator=gen)
    w = [0.0] * 5 + [1.0]
    got = newton_schulz_combination(G, MUON, w, dtype=torch.bfloat16)
    assert got.dtype == torch.float32
    assert torch.equal(got, newton_schulz(G, MUON, dtype=torch.bfloat16).float())


@pytest.mark.parametrize("w", [[0.0, 0.0, 0.3, 0.0, 0.5, 0.2], [0.0, 0.7, 0.0, 0.0, 0.0, 0.0]])
def test_zero_weights_skip_their_iterates_without_changing_the_sum(gen, w):
    """Zero weights are not added; the sum is each bfloat16 iterate (``newton_schulz`` on the
    first k steps, the same ops) times its weight, summed in float32: within float32
    rounding of the float64 sum of those iterates, ``(K + 1) u32 sum_k |w_k| |X_k|`` per
    entry."""
    G = torch.randn(27, 44, generator=gen)
    got = newton_schulz_combination(G, MUON, w, dtype=torch.bfloat16)
    its = [newton_schulz(G, MUON[:k], dtype=torch.bfloat16).double() for k in range(6)]
    ref = sum(wk * x for wk, x in zip(w, its, strict=True))
    scale = sum(abs(wk) * x.abs() for wk, x in zip(w, its, strict=True))
    bound = 6 * torch.finfo(torch.float32).eps * scale
    assert bool(((got.double() - ref).abs() <= bound + 1e-30).all())


def test_all_zero_weights_still_propagate_a_nan(gen):
    G = torch.randn(9, 12, generator=gen)
    G[2, 3] = float("nan")
    got = newton_schulz_combination(G, MUON, [0.0] * 6, dtype=torch.bfloat16, check_finite=False)
    assert torch.isnan(got).any()


def test_spectra_normalisation_and_margin():
    s = torch.tensor([3.0, 4.0, 0.0])
    F = newton_schulz_spectra(s, MUON, margin=2.0)
    assert torch.allclose(F[:, 0], torch.tensor([0.3, 0.4, 0.0], dtype=torch.float64))
    assert float(F[2].abs().max()) == 0.0  # zero stays zero through odd polynomials
    a, b, c = MUON[0]
    x = 0.3
    assert math.isclose(float(F[0, 1]), a * x + b * x**3 + c * x**5, rel_tol=1e-15)


def test_bad_weights(gen):
    G = torch.randn(5, 4, generator=gen)
    with pytest.raises(ValueError, match="6 finite numbers"):
        newton_schulz_combination(G, MUON, [1.0] * 5)
    with pytest.raises(ValueError, match="6 finite numbers"):
        newton_schulz_combination(G, MUON, [1.0] * 5 + [math.nan])
    with pytest.raises(ValueError, match="shape"):
        newton_schulz_combination(G, MUON, torch.ones(7))
    with pytest.raises(ValueError, match="shape"):
        newton_schulz_combination(torch.randn(2, 5, 4, generator=gen), MUON, torch.ones(3, 6))
    with pytest.raises(ValueError, match="non-finite weights"):
        newton_schulz_combination(G, MUON, torch.tensor([1.0] * 5 + [math.inf]))
