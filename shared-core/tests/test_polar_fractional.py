"""spectral_power: identities of the SVD route, and the iterative route against it."""

import math

import numpy as np
import pytest
import torch

from shared_core.polar import msign, spectral_power

# tolerances here follow an error model; `nox -s numerics` reruns them on every BLAS path
pytestmark = pytest.mark.numerics


def _matrix(m, n, kappa, gen, batch=(), dtype=torch.float64):
    """Random orthogonal factors, singular values log-spaced from 1 down to 1/kappa."""
    k = min(m, n)
    U, _ = torch.linalg.qr(torch.randn(*batch, m, k, generator=gen, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(*batch, n, k, generator=gen, dtype=torch.float64))
    s = torch.logspace(0, -math.log10(kappa), k, dtype=torch.float64)
    return ((U * s) @ V.mT).to(dtype)


def _rel(a, b):
    a, b = a.double(), b.double()
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


def test_a0_is_msign_exactly(gen):
    for dtype in (torch.float32, torch.float64):
        G = torch.randn(2, 30, 20, generator=gen, dtype=dtype)
        assert torch.equal(spectral_power(G, 0.0), msign(G, method="svd"))


def test_a1_is_g_over_its_frobenius_norm(gen):
    G = torch.randn(3, 25, 40, generator=gen, dtype=torch.float64)
    want = G / torch.linalg.matrix_norm(G, keepdim=True)
    for method in ("svd", "iterative"):
        torch.testing.assert_close(spectral_power(G, 1.0, method), want, rtol=0, atol=1e-13)


@pytest.mark.parametrize("a", [0.0, 0.2, 0.5, 0.85, 1.0])
def test_singular_values_are_normalised_powers(a, gen):
    G = torch.randn(40, 25, generator=gen, dtype=torch.float64)
    s = np.linalg.svd(G.numpy(), compute_uv=False)
    want = (s / np.linalg.norm(s)) ** a
    got = np.linalg.svd(spectral_power(G, a).numpy(), compute_uv=False)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)
    # Same singular vectors as G: the power commutes with the polar factor.
    Q = msign(G, method="svd")
    P = spectral_power(G, a)
    torch.testing.assert_close(Q.T @ P, P.T @ Q, atol=1e-12, rtol=0)


def test_scale_invariance_zero_and_rank_deficiency(gen):
    G = torch.randn(20, 12, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(spectral_power(5.0 * G, 0.3), spectral_power(G, 0.3))
    for method in ("svd", "iterative"):
        for a in (0.0, 0.4):
            assert torch.equal(spectral_power(torch.zeros(6, 4), a, method), torch.zeros(6, 4))
    low = torch.randn(20, 2, generator=gen, dtype=torch.float64) @ torch.randn(
        2, 12, generator=gen, dtype=torch.float64
    )
    sv = torch.linalg.svdvals(spectral_power(low, 0.4))
    assert int((sv > 1e-3).sum()) == 2 and float(sv[2:].max()) < 1e-5
    assert torch.equal(spectral_power(low, 0.0), msign(low, method="svd"))


@pytest.mark.parametrize("a", [0.0, 0.1, 0.3, 0.5, 0.7, 0.95])
@pytest.mark.parametrize(
    ("shape", "kappa", "batch"),
    [((48, 32), 10, ()), ((32, 48), 100, ()), ((40, 40), 100, (3,))],
)
def test_iterative_agrees_with_svd_in_float32(a, shape, kappa, batch, gen):
    G = _matrix(*shape, kappa, gen, batch=batch, dtype=torch.float32)
    it = spectral_power(G, a, method="iterative")
    assert it.dtype == torch.float32 and it.shape == G.shape
    exact = spectral_power(G.double(), a, method="svd")
    assert _rel(it, exact) <= 1e-3


def test_iterative_in_float64_is_tight(gen):
    G = _matrix(60, 45, 1e4, gen)
    for a in (0.0, 0.37):
        assert _rel(spectral_power(G, a, "iterative"), spectral_power(G, a)) <= 1e-8


def test_iterative_rejects_what_it_cannot_resolve(gen):
    G = _matrix(50, 50, 1e5, gen, dtype=torch.float32)
    with pytest.raises(ValueError, match="did not converge"):
        spectral_power(G, 0.3, method="iterative")


def test_bad_arguments(gen):
    G = torch.randn(5, 4, generator=gen)
    for a in (-0.1, 1.5, float("nan"), "x"):
        with pytest.raises(ValueError, match="exponent a"):
            spectral_power(G, a)
    with pytest.raises(ValueError, match="valid methods"):
        spectral_power(G, 0.5, method="newton")
    with pytest.raises(ValueError, match="float32 or float64"):
        spectral_power(G, 0.5, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="max_iter"):
        spectral_power(G, 0.5, method="iterative", max_iter=0)
    G[1, 1] = float("inf")
    with pytest.raises(ValueError, match="non-finite"):
        spectral_power(G, 0.5)
