"""Fractional members from weighted Newton-Schulz iterates (mixture.py), against references:
an independent least-squares solve, float64 SVD maps, a brute-force Kronecker curvature."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from adaptive_lmo.criterion import weighted_decrease
from adaptive_lmo.fractional import fractional_update
from adaptive_lmo.mixture import (
    BF16_U,
    fit_weights,
    mixed_member,
    realised_decrease,
    target_spectrum,
)
from shared_core.polar import coefficients_for, default_rtol, newton_schulz_spectra

pytestmark = pytest.mark.numerics

U64 = torch.finfo(torch.float64).eps / 2
MUON = [tuple(c) for c in coefficients_for("muon", 5)]


def _rand(shape, seed, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _rel(a, b):
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


def _nnls_by_supports(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min ||Ax - b|| over x >= 0 by brute force: the unconstrained least squares on every
    support, the best feasible one (the optimum of this convex problem is the least-squares
    solution on its own support; an algorithm independent of SciPy's active set)."""
    n = A.shape[1]
    best, best_x = np.inf, None
    for mask in itertools.product([False, True], repeat=n):
        if not any(mask):
            continue
        idx = np.flatnonzero(mask)
        sol = np.linalg.lstsq(A[:, idx], b, rcond=None)[0]
        if (sol < 0).any():
            continue
        x = np.zeros(n)
        x[idx] = sol
        r = np.linalg.norm(A @ x - b)
        if r < best:
            best, best_x = r, x
    return best_x


@pytest.mark.parametrize("scale", ["none", "polar", "spectral"])
@pytest.mark.parametrize("a", [0.2, 0.5, 0.85])
@pytest.mark.parametrize("steps", [3, 5])
def test_fit_solves_the_ridge_problem(scale, a, steps):
    """The weights solve the ridge problem with w >= 0 for the table's first ``steps``
    quintics: [B; diag(delta_k ||f_k||)] w ~ [t; 0] written as one least-squares system,
    against the brute-force optimum over supports. Error model: each support's solve is
    backward stable, so w is within ~cond^2 eps of the reference (normal-equation bound)."""
    s = torch.linalg.svdvals(_rand((47, 31), 1))
    rtol = default_rtol(47, 31, torch.float64)
    w = fit_weights(s, a, scale, rtol, steps)
    assert w.shape == (steps + 1,) and bool((w >= 0).all())
    B = newton_schulz_spectra(s, MUON[:steps]).numpy()
    t = target_spectrum(s, a, scale, rtol).numpy()
    delta = BF16_U * np.arange(1, steps + 2)
    R = np.diag(delta * np.linalg.norm(B, axis=0))
    A, b = np.vstack([B, R]), np.concatenate([t, np.zeros(steps + 1)])
    ref = _nnls_by_supports(A, b)
    cond = np.linalg.cond(A)
    assert np.linalg.norm(w.numpy() - ref) <= 50 * cond**2 * U64 * np.linalg.norm(ref)


def test_fitted_map_stays_positive_and_bounded_off_its_spectrum():
    """Weights fitted on one spectrum, evaluated on a grid of normalised singular values over
    (0, 1]: the map is positive everywhere (Muon's quintic has no positive root and the
    weights are >= 0) and at most sum(w) times the iterates' largest value, whatever the
    spectrum drifts to. The spectra are a spike over a small bulk (teacher-student's layer A
    has this shape); on the bulk-0.01, a = 0.2 case unconstrained weights map part of (0, 1]
    below -1, i.e. flip those directions."""
    g = torch.Generator().manual_seed(0)
    for bulk, a in ((0.01, 0.2), (0.1, 0.2), (0.1, 0.5), (0.03, 0.85)):
        jitter = 0.5 + torch.rand(31, generator=g, dtype=torch.float64)
        s = torch.cat([torch.ones(1, dtype=torch.float64), bulk * jitter])
        w = fit_weights(s, a, "polar", default_rtol(32, 64, torch.float32))
        x = torch.logspace(-6, 0, 2001, dtype=torch.float64)  # normalised values
        cols = [x]
        for a3, b3, c3 in MUON:  # the iterates' maps, composed here by hand
            y = cols[-1]
            cols.append(y * (a3 + y * y * (b3 + c3 * y * y)))
        f = torch.stack(cols, dim=-1)  # (grid, K+1)
        mapped = f @ w
        assert bool((mapped > 0).all())
        assert float(mapped.max()) <= float(w.sum()) * float(f.max()) * (1 + 1e-12)


def test_target_is_the_exact_member_spectrum():
    """target_spectrum is the exact member's singular values (SVD of fractional_update) on
    the normalised spectrum: scale-free for polar/spectral, times ||P||^a for none."""
    P = _rand((29, 40), 2)
    s = torch.linalg.svdvals(P)
    rtol = default_rtol(29, 40, torch.float64)
    for scale in ("polar", "spectral", "none"):
        exact = torch.linalg.svdvals(fractional_update(P, 0.4, method="svd", scale=scale))
        t = target_spectrum(s, 0.4, scale, rtol)
        if scale == "none":
            t = t * float(torch.linalg.vector_norm(P)) ** 0.4
        assert _rel(t, exact) < 100 * 40 * U64


@pytest.mark.parametrize("shape", [(33, 21), (21, 33), (3, 14, 19)])
@pytest.mark.parametrize("steps", [3, 4, 5])
def test_float64_member_is_the_fitted_map(shape, steps):
    """In float64 the mixed member is exactly the spectral map sum_k w_k f_k(s) (no SVD used)
    of the table's first ``steps`` quintics (the number of weights sets it): compared with
    U diag(B w) V^T from the SVD, to the iteration's forward error."""
    P = _rand(shape, 3)
    U, s, Vh = torch.linalg.svd(P, full_matrices=False)
    rtol = default_rtol(*shape[-2:], torch.float64)
    for scale in ("none", "polar"):
        w = fit_weights(s, 0.45, scale, rtol, steps)
        got = mixed_member(P, w if len(shape) == 3 else w.tolist(), 0.45, scale)
        mapped = (newton_schulz_spectra(s, MUON[:steps]) @ w.unsqueeze(-1)).squeeze(-1)
        if scale == "none":
            mapped = mapped * torch.linalg.vector_norm(P, dim=(-2, -1)).unsqueeze(-1) ** 0.45
        ref = (U * mapped.unsqueeze(-2)) @ Vh
        L = 3.9  # max |p'| of Muon's quintics over [0, 1.2] (shared-core's test derives it)
        tol = 3 * max(shape[-2:]) * U64 * 6 * L**steps * float(w.abs().sum())
        assert _rel(got, ref) < tol


def test_step_counts_outside_the_table_are_refused():
    s = torch.linalg.svdvals(_rand((9, 7), 5))
    for bad in (0, 6):
        with pytest.raises(ValueError, match="Newton-Schulz steps"):
            fit_weights(s, 0.5, "polar", 0.0, bad)
        with pytest.raises(ValueError, match="Newton-Schulz steps"):
            mixed_member(_rand((9, 7), 5), [0.1] * (bad + 1), 0.5, "polar")


@pytest.mark.parametrize("a", [0.3, 0.6])
def test_bfloat16_member_within_fit_plus_rounding(a):
    """bfloat16 iterates on a Gaussian direction (condition ~1e2): the realised error against
    the exact member is at most the fit's residual plus the ridge's rounding model
    sqrt(sum_k (delta_k ||f_k|| w_k)^2), relative to ||t|| (measured well inside it)."""
    P = _rand((256, 200), 4, torch.float32)
    U, s, Vh = torch.linalg.svd(P.double(), full_matrices=False)
    rtol = default_rtol(256, 200, torch.float32)
    w = fit_weights(s, a, "polar", rtol)
    B = newton_schulz_spectra(s, MUON)
    t = target_spectrum(s, a, "polar", rtol)
    fit = float(torch.linalg.vector_norm(B @ w - t))
    delta = BF16_U * torch.arange(1, 7, dtype=torch.float64)
    noise = float(torch.linalg.vector_norm(delta * torch.linalg.vector_norm(B, dim=0) * w))
    got = mixed_member(P, w.tolist(), a, "polar").double()
    exact = (U * t) @ Vh
    err = float(torch.linalg.vector_norm(got - exact))
    assert err <= fit + noise
    assert fit < 0.05 * float(torch.linalg.vector_norm(t))  # the family is fit, not just bounded


def test_realised_decrease_against_kronecker_brute_force():
    """The surrogate decrease of a full (non-diagonal) direction: <G, D>^2 / (2 tr(D^T B D A))
    computed with the full m x m and n x n factors, against realised_decrease's r x r form."""
    m = n = 17
    P = _rand((m, n), 5)
    U, s, Vh = torch.linalg.svd(P)
    Xa, Xb = _rand((40, n), 6), _rand((50, m), 7)
    Af, Bf = Xa.T @ Xa / 40, Xb.T @ Xb / 50
    A, Bo = Vh @ Af @ Vh.T, U.T @ Bf @ U
    D = _rand((m, n), 8)
    num = float((P * D).sum()) ** 2
    vecD = D.T.reshape(-1)  # column-major vec
    den = float(vecD @ torch.kron(Af, Bf) @ vecD)
    ref = num / (2 * den)
    got = float(realised_decrease(D, U, Vh, s, A, Bo))
    assert abs(got - ref) <= 1e3 * m * U64 * abs(ref)
    # for a family member (diagonal in the basis) it is weighted_decrease with b * c
    w = s.pow(0.3)
    Dm = (U * w) @ Vh
    wd = float(weighted_decrease(w.unsqueeze(0), s, Bo * A, s))
    assert abs(float(realised_decrease(Dm, U, Vh, s, A, Bo)) - wd) <= 1e3 * m * U64 * wd
    # input-only curvature (a vector): sum_ij Dt_ij^2 c_j
    c = torch.diagonal(A)
    Dt = U.T @ D @ Vh.T
    ref_v = num / (2 * float((Dt**2 * c).sum()))
    assert abs(float(realised_decrease(D, U, Vh, s, c, None)) - ref_v) <= 1e3 * m * U64 * ref_v


def test_mixture_loss_against_brute_force():
    """mixture_loss = 1 - decrease(realised mixture) / decrease(exact member), both by the
    full Kronecker curvature with m x m and n x n factors (float64)."""
    from adaptive_lmo.mixture import mixture_loss

    m, n = 15, 21
    P = _rand((m, n), 9) * torch.logspace(0, -1.5, n, dtype=torch.float64)
    U, s, Vh = torch.linalg.svd(P, full_matrices=False)
    Xa, Xb = _rand((60, n), 10), _rand((70, m), 11)
    Af, Bf = Xa.T @ Xa / 60, Xb.T @ Xb / 70
    A, Bo = Vh @ Af @ Vh.T, U.T @ Bf @ U
    rtol = default_rtol(m, n, torch.float64)
    w, loss = mixture_loss(U, s, Vh, 0.35, "polar", rtol, None, A, Bo)

    def dec(D):
        vecD = D.T.reshape(-1)
        return float((P * D).sum()) ** 2 / (2 * float(vecD @ torch.kron(Af, Bf) @ vecD))

    D = mixed_member(P, w.tolist(), 0.35, "polar")
    exact = fractional_update(P, 0.35, method="svd", scale="polar")
    ref = 1 - dec(D) / dec(exact)
    assert abs(loss - ref) <= 1e4 * n * U64 * max(1.0, abs(ref))
    assert abs(ref) > 1e-8  # the fit is not exact here: the test compares a real loss
