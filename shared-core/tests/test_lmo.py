"""The math of shared_core.lmo: every norm's LMO, dual and value against independent checks.

Everything runs in float64 on random inputs of awkward sizes. Each property is checked for
every norm in CASES: the LMO attains -dual_norm, lies on the unit sphere, scales with the radius,
beats every sampled feasible point; the dual norm obeys Hölder and is the supremum that samples
approach from below; values match numpy/scipy computed from the definitions.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.lmo import (
    L1,
    L2,
    ColNorm,
    ColNormDual,
    Frobenius,
    LInf,
    MatrixNorm,
    Norm,
    Nuclear,
    RowNorm,
    RowNormDual,
    Schatten,
    Spectral,
    colnorm_lmo,
    frobenius_lmo,
    nuclear_lmo,
    rownorm_dual_lmo,
    schatten_lmo,
    schatten_norm,
    spectral_lmo,
)

# tolerances here follow an error model; `nox -s numerics` reruns them on every BLAS path
pytestmark = pytest.mark.numerics

MATRIX_SHAPES = [(7, 5), (13, 31), (3, 6, 9)]
MATRIX_NORMS = [
    Spectral(),
    Nuclear(),
    Frobenius(),
    Schatten(1),
    Schatten(1.5),
    Schatten(2),
    Schatten(3),
    Schatten(math.inf),
    ColNorm(),
    ColNormDual(),
    RowNorm(),
    RowNormDual(),
]
# Vector norms over the whole tensor and over chosen axes of a batch.
VECTOR_CASES = [
    (cls(dim), shape)
    for cls in (LInf, L1, L2)
    for dim, shape in [(None, (37,)), (None, (7, 5)), (-1, (3, 6, 9)), ((0, 2), (3, 6, 9))]
]
CASES = [(n, s) for n in MATRIX_NORMS for s in MATRIX_SHAPES] + VECTOR_CASES
IDS = [f"{n!r}-{'x'.join(map(str, s))}" for n, s in CASES]
cases = pytest.mark.parametrize(("norm", "shape"), CASES, ids=IDS)


def _rand(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def _for_stack(norm: Norm, G: torch.Tensor, n_lead: int) -> Norm:
    """The same norm applied to a stack ``(N..., *G.shape)`` of samples shaped like ``G``."""
    if isinstance(norm, MatrixNorm):
        return norm  # matrix norms already batch over leading axes
    return type(norm)(dim=tuple(n_lead + d for d in norm.dims(G)))


def _keep(value: torch.Tensor, norm: Norm, like: torch.Tensor) -> torch.Tensor:
    """Reinsert the axes ``norm`` reduced, so that ``value`` broadcasts against ``like``."""
    for d in norm.dims(like):
        value = value.unsqueeze(d)
    return value


def _to_sphere(norm: Norm, D: torch.Tensor) -> torch.Tensor:
    return D / _keep(norm.norm(D), norm, D)


def _close(a, b, rtol=1e-6, atol=1e-12):
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


# --- the LMO attains the dual norm, on the sphere, scaling with the radius -----------------


@cases
def test_lmo_attains_minus_dual_norm(norm, shape, gen):
    G = _rand(gen, *shape)
    D = norm.lmo(G, 1.0)
    _close(norm.inner(G, D), -norm.dual_norm(G))


@cases
def test_lmo_is_on_the_unit_sphere(norm, shape, gen):
    G = _rand(gen, *shape)
    _close(norm.norm(norm.lmo(G, 1.0)), torch.ones_like(norm.dual_norm(G)))


@cases
def test_lmo_scales_with_radius_and_not_with_gradient_scale(norm, shape, gen):
    G = _rand(gen, *shape)
    D1 = norm.lmo(G, 1.0)
    for r in (0.3, 2.5):
        _close(norm.lmo(G, r), r * D1)
    assert torch.equal(norm.lmo(G, 0.0), torch.zeros_like(G))
    # The minimiser over a ball depends on the direction of G only.
    _close(norm.lmo(7.5 * G, 1.0), D1)


@cases
def test_no_sampled_feasible_point_beats_the_lmo(norm, shape, gen):
    G = _rand(gen, *shape)
    best = norm.inner(G, norm.lmo(G, 1.0))
    stack = _for_stack(norm, G, 1)
    # Gaussian, sparse, and near-optimal directions (the LMO plus noise), all put on the sphere.
    gauss = _rand(gen, 300, *shape)
    sparse = gauss * (torch.rand(300, *shape, generator=gen, dtype=torch.float64) < 0.1)
    # A sample with nothing left in some measured block cannot be put on the sphere.
    sparse = torch.where(_keep(stack.norm(sparse), stack, sparse) == 0, gauss, sparse)
    near = norm.lmo(G, 1.0) + 1e-3 * _rand(gen, 300, *shape)
    for D in (gauss, sparse, near):
        values = stack.inner(G.expand_as(D), _to_sphere(stack, D))
        assert torch.all(values >= best - 1e-10 * best.abs()), (values.min(), best)


# --- duality ------------------------------------------------------------------------------


@cases
def test_dual_of_dual_is_the_norm(norm, shape, gen):
    G = _rand(gen, *shape)
    assert norm.dual().dual() == norm
    _close(norm.dual().norm(G), norm.dual_norm(G))
    _close(norm.dual().dual_norm(G), norm.norm(G))


@cases
def test_holder_inequality_on_random_pairs(norm, shape, gen):
    G, D = _rand(gen, 200, *shape), _rand(gen, 200, *shape) * 3.0
    stack = _for_stack(norm, G[0], 1)
    lhs = stack.inner(G, D).abs()
    rhs = stack.norm(D) * stack.dual_norm(G)
    assert torch.all(lhs <= rhs * (1 + 1e-12))


@cases
def test_dual_norm_is_the_sup_samples_approach_from_below(norm, shape, gen):
    G = _rand(gen, *shape)
    dual = norm.dual_norm(G)
    stack = _for_stack(norm, G, 1)
    top = -norm.lmo(G, 1.0)  # the maximiser of <G, D> on the unit ball
    noise = _rand(gen, 100, *shape)  # the same directions at every eps, so gaps are comparable
    gaps = []
    for eps in (1e-1, 1e-2, 1e-3, 1e-4):
        D = _to_sphere(stack, top + eps * noise)
        values = stack.inner(G.expand_as(D), D)
        assert torch.all(values <= dual * (1 + 1e-12))
        gaps.append((dual - values.amax(0)) / dual)
    # The best sample closes in on the dual norm as the samples concentrate at the maximiser:
    # the gap is O(eps) at a vertex-like maximiser and O(eps^2) on a smooth sphere, so a tenfold
    # smaller eps must cut it at least about tenfold. A dual norm off by any constant would
    # leave a gap that stops shrinking instead.
    assert torch.all(gaps[1] <= gaps[0]) and torch.all(gaps[2] <= gaps[1])
    assert torch.all(gaps[3] <= 0.2 * gaps[2])


# --- values against numpy / scipy ---------------------------------------------------------


def _sv(A: np.ndarray) -> np.ndarray:
    flat = A.reshape(-1, *A.shape[-2:])
    s = np.stack([scipy.linalg.svd(a, compute_uv=False) for a in flat])
    return s.reshape(*A.shape[:-2], -1)


def _ref_norm(norm: Norm, A: np.ndarray) -> np.ndarray:
    """The norm from its definition, in numpy (vector norms reduce over their axes)."""
    if isinstance(norm, Spectral):
        return _sv(A).max(-1)
    if isinstance(norm, Nuclear):
        return _sv(A).sum(-1)
    if isinstance(norm, Frobenius):
        return np.sqrt((A**2).sum((-2, -1)))
    if isinstance(norm, Schatten):
        s = _sv(A)
        return s.max(-1) if math.isinf(norm.p) else (s**norm.p).sum(-1) ** (1 / norm.p)
    if isinstance(norm, ColNorm | ColNormDual):
        cols = np.sqrt((A**2).sum(-2))
        return cols.max(-1) if isinstance(norm, ColNorm) else cols.sum(-1)
    if isinstance(norm, RowNorm | RowNormDual):
        rows = np.sqrt((A**2).sum(-1))
        return rows.max(-1) if isinstance(norm, RowNorm) else rows.sum(-1)
    axes = norm.dims(torch.from_numpy(A))
    if isinstance(norm, LInf):
        return np.abs(A).max(axis=axes)
    if isinstance(norm, L1):
        return np.abs(A).sum(axis=axes)
    assert isinstance(norm, L2)
    return np.sqrt((A**2).sum(axis=axes))


@cases
def test_norm_and_dual_values_match_numpy(norm, shape, gen):
    G = _rand(gen, *shape)
    A = G.numpy()
    np.testing.assert_allclose(norm.norm(G).numpy(), _ref_norm(norm, A), rtol=1e-10)
    np.testing.assert_allclose(norm.dual_norm(G).numpy(), _ref_norm(norm.dual(), A), rtol=1e-10)


@pytest.mark.parametrize("shape", MATRIX_SHAPES)
def test_matrix_norms_match_torch_matrix_norm(shape, gen):
    G = _rand(gen, *shape)
    _close(Spectral().norm(G), torch.linalg.matrix_norm(G, ord=2), rtol=1e-12)
    _close(Nuclear().norm(G), torch.linalg.matrix_norm(G, ord="nuc"), rtol=1e-12)
    _close(Frobenius().norm(G), torch.linalg.matrix_norm(G, ord="fro"), rtol=1e-12)


def test_colnorm_and_rownorm_are_operator_norms(gen):
    # ColNorm = max ||Gx||_2 over the l1 ball, attained at the vertices +-e_j; RowNorm =
    # max ||Gx||_inf over the l2 ball = max_i max_{||x||<=1} <g^i, x>. Sampled from below:
    A = _rand(gen, 7, 5).numpy()
    x = np.random.default_rng(0).standard_normal((5, 20000))
    l1_vals = np.linalg.norm(A @ (x / np.abs(x).sum(0)), axis=0)
    l2_vals = np.abs(A @ (x / np.linalg.norm(x, axis=0))).max(0)
    col, row = ColNorm().norm(torch.from_numpy(A)).item(), RowNorm().norm(torch.from_numpy(A))
    assert l1_vals.max() <= col * (1 + 1e-12)
    assert np.linalg.norm(A, axis=0).max() == pytest.approx(col, rel=1e-12)
    assert l2_vals.max() <= row.item() * (1 + 1e-12)
    assert l2_vals.max() >= row.item() * 0.99


# --- the closed forms against an SVD computed by scipy -------------------------------------


def _scipy_svd(A: np.ndarray):
    U, s, Vh = scipy.linalg.svd(A, full_matrices=False)
    return U, s, Vh


@pytest.mark.parametrize("shape", [(7, 5), (13, 31)])
def test_spectral_nuclear_schatten_lmos_match_scipy_svd(shape, gen):
    G = _rand(gen, *shape)
    U, s, Vh = _scipy_svd(G.numpy())
    np.testing.assert_allclose(spectral_lmo(G, 0.7).numpy(), -0.7 * U @ Vh, atol=1e-12)
    np.testing.assert_allclose(
        nuclear_lmo(G, 0.7).numpy(), -0.7 * np.outer(U[:, 0], Vh[0]), atol=1e-12
    )
    for p in (1.3, 4.0):
        q = p / (p - 1)
        w = s ** (q - 1) / np.linalg.norm(s, q) ** (q - 1)
        np.testing.assert_allclose(schatten_lmo(G, p, 0.7).numpy(), -0.7 * (U * w) @ Vh, atol=1e-12)


def test_column_and_row_lmos_match_numpy(gen):
    G = _rand(gen, 3, 6, 9)
    A = G.numpy()
    np.testing.assert_allclose(
        colnorm_lmo(G, 2.0).numpy(), -2.0 * A / np.linalg.norm(A, axis=-2, keepdims=True)
    )
    rows = np.linalg.norm(A, axis=-1)  # (3, 6)
    expected = np.zeros_like(A)
    for b, i in enumerate(rows.argmax(-1)):
        expected[b, i] = -2.0 * A[b, i] / rows[b, i]
    np.testing.assert_allclose(rownorm_dual_lmo(G, 2.0).numpy(), expected)


def test_schatten_ends_agree_with_their_special_cases(gen):
    G = _rand(gen, 3, 6, 9)
    _close(Schatten(1).lmo(G), Nuclear().lmo(G), rtol=0, atol=0)
    _close(Schatten(2).lmo(G), frobenius_lmo(G), rtol=0, atol=0)
    _close(Schatten(math.inf).lmo(G), Spectral().lmo(G), rtol=0, atol=0)
    # The general formula tends continuously to the ends (random G has a spectral gap).
    _close(schatten_lmo(G, 1 + 1e-6), Nuclear().lmo(G), rtol=0, atol=1e-9)
    _close(schatten_lmo(G, 1e6), Spectral().lmo(G), rtol=0, atol=1e-4)
    _close(schatten_lmo(G, 2 + 1e-9), frobenius_lmo(G), rtol=0, atol=1e-7)
    _close(schatten_norm(G, 1e6), Spectral().norm(G), rtol=1e-5, atol=0)


@settings(max_examples=25, deadline=None)
@given(p=st.floats(1.0, 60.0), seed=st.integers(0, 2**31 - 1))
def test_schatten_lmo_for_any_p(p, seed):
    G = torch.randn(6, 4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    n = Schatten(p)
    D = n.lmo(G, 1.0)
    _close(n.inner(G, D), -n.dual_norm(G), rtol=1e-8)
    _close(n.norm(D), torch.tensor(1.0, dtype=torch.float64), rtol=1e-8)
