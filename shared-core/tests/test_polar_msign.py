"""msign: every method against float64 SVD references, shapes, dtypes, edge cases, bad input."""

import numpy as np
import pytest
import torch
from torch.optim._muon import _zeropower_via_newtonschulz

from shared_core.polar import (
    METHODS,
    NS_TABLES,
    auto_method,
    eigh_sign,
    gram_polar,
    msign,
    newton_schulz,
    normalize_frobenius,
    spectral_power,
    svd_polar,
)

# tolerances here follow an error model; `nox -s numerics` reruns them on every BLAS path
pytestmark = pytest.mark.numerics


def _polar64(G):
    """U V^T by numpy's float64 SVD (an oracle independent of torch.linalg)."""
    u, _, vt = np.linalg.svd(G.detach().double().numpy(), full_matrices=False)
    return torch.from_numpy(u @ vt)


def _rel(a, b):
    """Relative Frobenius error; a batch of matrices counts as one stacked matrix."""
    a, b = a.double(), b.double()
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


# Accuracy each table reaches on a 96x64 Gaussian (condition number about 9) in float32 at its
# default steps: relative Frobenius error bound, and the band of output singular values.
TABLE_ACCURACY = {
    "muon": (0.25, 0.60, 1.25),  # 5 steps; Muon's quintic plateaus, errors ~0.2
    "polar_express": (2e-3, 0.99, 1.01),  # 6 steps; converges: errors ~1e-3
    "rms5": (0.10, 0.85, 1.14),  # 5 steps; errors ~0.085
}


@pytest.mark.parametrize("name", sorted(NS_TABLES))
def test_each_table_reaches_its_stated_accuracy(name, gen):
    assert set(TABLE_ACCURACY) == set(NS_TABLES)
    bound, lo, hi = TABLE_ACCURACY[name]
    for _ in range(3):
        G = torch.randn(96, 64, generator=gen)
        Q = msign(G, method=name)
        assert Q.dtype == torch.float32 and Q.shape == G.shape
        assert _rel(Q, _polar64(G)) <= bound
        sv = torch.linalg.svdvals(Q.double())
        assert lo <= float(sv.min()) and float(sv.max()) <= hi


def test_default_is_polar_express_six_steps(gen):
    G = torch.randn(40, 70, generator=gen)
    torch.testing.assert_close(msign(G), msign(G, "polar_express", steps=6), rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(NS_TABLES))
def test_bfloat16_iterations_stay_bounded(name, gen):
    # bfloat16 round-off must not push singular values past the quintics' stable range, also
    # for square Gaussians (tiny singular values) and for more steps than the table has.
    for shape in [(96, 96), (150, 40)]:
        G = torch.randn(shape, generator=gen)
        for steps in (6, 9):
            Q = msign(G, method=name, steps=steps, dtype=torch.bfloat16)
            assert Q.dtype == torch.float32
            assert float(torch.linalg.svdvals(Q.double()).max()) <= 1.25


def test_polar_express_in_bfloat16_is_accurate(gen):
    G = torch.randn(96, 64, generator=gen).bfloat16()
    Q = msign(G, dtype=torch.bfloat16)
    assert Q.dtype == torch.bfloat16
    assert _rel(Q, _polar64(G)) <= 1e-2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_svd_path_is_exact_and_orthogonal(dtype, gen):
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for shape in [(50, 20), (20, 50), (33, 33)]:
        G = torch.randn(shape, generator=gen, dtype=dtype)
        Q = msign(G, method="svd")
        assert Q.dtype == dtype
        assert _rel(Q, _polar64(G)) <= tol
        k = min(shape)
        small = Q.mT @ Q if shape[0] >= shape[1] else Q @ Q.mT
        torch.testing.assert_close(small, torch.eye(k, dtype=dtype), atol=tol, rtol=0)


def test_svd_path_keeps_singular_values_above_the_rank_cutoff(gen):
    # Singular values down to 1e-6 of the largest are directions of a float64 G (cut-off
    # 64 * eps64 ~ 1e-14): the exact factor stays orthogonal. In float32 the cut-off is
    # 64 * eps32 ~ 8e-6, so the values below it are dropped (numpy's matrix_rank rule), unless
    # the caller asks for rtol = 0.
    U, _ = torch.linalg.qr(torch.randn(64, 64, generator=gen, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(64, 64, generator=gen, dtype=torch.float64))
    s = torch.logspace(0, -6, 64, dtype=torch.float64)
    G = (U * s) @ V.T
    Q = msign(G, method="svd")
    torch.testing.assert_close(Q.T @ Q, torch.eye(64, dtype=torch.float64), atol=1e-10, rtol=0)
    Q32 = svd_polar(G.float(), rtol=0.0)
    torch.testing.assert_close(Q32.T @ Q32, torch.eye(64), atol=1e-5, rtol=0)
    # the result is a partial isometry: singular values 1 (kept) or round-off (dropped)
    kept = int((torch.linalg.svdvals(svd_polar(G.float()).double()) > 0.5).sum())
    assert kept == int((s > 64 * torch.finfo(torch.float32).eps).sum())


def test_svd_dtype_request(gen):
    G = torch.randn(30, 20, generator=gen)
    Q = msign(G, method="svd", dtype=torch.float64)
    assert Q.dtype == torch.float32
    assert _rel(Q, _polar64(G)) <= 1e-7
    with pytest.raises(ValueError, match="float32 or float64"):
        msign(G, method="svd", dtype=torch.bfloat16)


@pytest.mark.parametrize("method", ["polar_express", "muon", "svd", "gram"])
def test_tall_wide_and_batched(method, gen):
    G = torch.randn(2, 2, 45, 19, generator=gen)
    Q = msign(G, method=method)
    assert Q.shape == G.shape
    for i in range(2):
        for j in range(2):
            torch.testing.assert_close(Q[i, j], msign(G[i, j], method=method))
    # Wide input is handled through the same (smaller) Gram: msign(G^T) = msign(G)^T.
    torch.testing.assert_close(msign(G.mT, method=method), Q.mT)


def test_wide_svd_factors_the_tall_transpose(gen, monkeypatch):
    # LAPACK is slower on wide input than on its transpose: only tall matrices reach the SVD,
    # and the wide result is still the float64 polar factor.
    shapes = []
    real_svd = torch.linalg.svd

    def spy(X, *args, **kwargs):
        shapes.append(tuple(X.shape[-2:]))
        return real_svd(X, *args, **kwargs)

    monkeypatch.setattr(torch.linalg, "svd", spy)
    G = torch.randn(2, 9, 61, generator=gen, dtype=torch.float64)
    Q = msign(G, method="svd")
    assert shapes == [(61, 9)]
    monkeypatch.setattr(torch.linalg, "svd", real_svd)
    for b in range(2):
        torch.testing.assert_close(Q[b], _polar64(G[b]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("shape", [(301, 7), (13, 257), (2, 97, 33)])
@pytest.mark.parametrize("cond", [1e1, 1e4])
def test_gram_path_matches_the_float64_svd_of_the_same_data(shape, cond, gen):
    # Conditioned float32 input; the oracle is numpy's float64 SVD of the very same numbers.
    m, n = shape[-2:]
    k = min(m, n)
    u = torch.linalg.qr(torch.randn(*shape[:-2], max(m, n), k, generator=gen, dtype=torch.float64))[
        0
    ]
    v = torch.linalg.qr(torch.randn(*shape[:-2], k, k, generator=gen, dtype=torch.float64))[0]
    s = torch.logspace(0, -np.log10(cond), k, dtype=torch.float64)
    G64 = (u * s) @ v.mT
    G = (G64 if m >= n else G64.mT).float()
    Q = gram_polar(G)
    assert Q.dtype == torch.float32 and Q.shape == G.shape
    flat_g, flat_q = G.reshape(-1, m, n), Q.reshape(-1, m, n)
    for g, q in zip(flat_g, flat_q, strict=True):
        # Computed in float64 throughout: float32 round-off of the result, whatever cond.
        assert _rel(q, _polar64(g)) <= 4 * torch.finfo(torch.float32).eps
    torch.testing.assert_close(msign(G, method="gram"), Q)


def test_gram_path_maps_numerically_zero_singular_values_to_zero(gen):
    u = torch.randn(40, 3, generator=gen, dtype=torch.float64)
    v = torch.randn(3, 9, generator=gen, dtype=torch.float64)
    G = u @ v  # rank 3 of 9: six singular values are round-off
    Q = gram_polar(G)
    U, s, Vh = np.linalg.svd(G.numpy(), full_matrices=False)
    ref = torch.from_numpy(U[:, :3] @ Vh[:3])
    torch.testing.assert_close(Q, ref, atol=1e-10, rtol=0)
    # Still a polar decomposition of G with a positive semidefinite factor of rank 3.
    H = Q.T @ G
    torch.testing.assert_close(Q @ H, G, atol=1e-10, rtol=0)
    assert torch.linalg.matrix_rank(Q).item() == 3
    # A cut-off above the smallest true singular value drops that direction too.
    keep2 = gram_polar(G, rtol=float(s[2] / s[0]) * 1.01)
    torch.testing.assert_close(keep2, torch.from_numpy(U[:, :2] @ Vh[:2]), atol=1e-10, rtol=0)


def test_batched_matches_reference_per_matrix(gen):
    G = torch.randn(4, 30, 50, generator=gen)
    Q = msign(G)
    for i in range(4):
        assert _rel(Q[i], _polar64(G[i])) <= 2e-3


def test_symmetric_input_gives_the_matrix_sign(gen):
    B = torch.randn(40, 40, generator=gen, dtype=torch.float64)
    S = (B + B.T) / 2
    w, V = np.linalg.eigh(S.numpy())
    sign_ref = torch.from_numpy((V * np.sign(w)) @ V.T)
    torch.testing.assert_close(msign(S, method="eigh"), sign_ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(eigh_sign(S), sign_ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(msign(S, method="svd"), sign_ref, atol=1e-10, rtol=0)
    # Newton-Schulz on a symmetric matrix converges to the same sign function.
    S32 = S.float()
    assert _rel(msign(S32, method="polar_express", steps=10), sign_ref) <= 1e-4


def test_eigh_rejects_non_symmetric_and_non_square(gen):
    with pytest.raises(ValueError, match="symmetric"):
        msign(torch.randn(5, 5, generator=gen), method="eigh")
    with pytest.raises(ValueError, match="square"):
        msign(torch.randn(5, 6, generator=gen), method="eigh")


@pytest.mark.parametrize("method", [m for m in METHODS if m != "eigh"])
@pytest.mark.parametrize("shape", [(7, 5), (3, 4, 9)])
def test_zero_input_returns_zero(method, shape):
    Z = torch.zeros(shape)
    out = msign(Z, method=method)
    assert out.shape == Z.shape and torch.equal(out, Z)


def test_zero_input_eigh_and_rank_deficient_svd(gen):
    assert torch.equal(msign(torch.zeros(4, 4), method="eigh"), torch.zeros(4, 4))
    u = torch.randn(20, 2, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 12, generator=gen, dtype=torch.float64)
    G = u @ v  # rank two: the factor is not unique; msign returns the partial isometry
    Q = msign(G, method="svd")  # U_2 V_2^T, whose Gram is the projector onto G's row space
    P = torch.linalg.pinv(G) @ G
    torch.testing.assert_close(Q.T @ Q, P, atol=1e-12, rtol=0)
    H = Q.T @ G  # still a polar decomposition G = Q H with H symmetric positive semidefinite
    torch.testing.assert_close(Q @ H, G, atol=1e-12, rtol=0)
    torch.testing.assert_close(H, H.T, atol=1e-12, rtol=0)
    assert float(torch.linalg.eigvalsh(H).min()) > -1e-12
    torch.testing.assert_close(H, H.T, atol=1e-12, rtol=0)
    assert float(torch.linalg.eigvalsh((H + H.T) / 2).min()) >= -1e-12


def test_zero_matrix_inside_a_batch(gen):
    G = torch.randn(3, 20, 10, generator=gen)
    G[1] = 0
    Q = msign(G)
    assert torch.equal(Q[1], torch.zeros(20, 10))
    torch.testing.assert_close(Q[0], msign(G[0]))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_input_raises(method, bad, gen):
    G = torch.randn(6, 6, generator=gen)
    G = (G + G.T) / 2
    G[2, 3] = G[3, 2] = bad
    with pytest.raises(ValueError, match="non-finite"):
        msign(G, method=method)


def test_check_finite_off_propagates_nan(gen):
    G = torch.randn(6, 4, generator=gen)
    G[0, 0] = float("nan")
    assert torch.isnan(msign(G, check_finite=False)).any()


def test_huge_finite_input_is_rescaled_not_rejected(gen):
    G = torch.randn(30, 20, generator=gen)
    big = G * 1e30  # the float32 Frobenius norm overflows; the entries do not
    assert torch.isinf(torch.linalg.matrix_norm(big))
    torch.testing.assert_close(msign(big), msign(G), atol=1e-5, rtol=0)
    assert torch.isfinite(normalize_frobenius(big)).all()


def test_scale_invariance_and_tiny_inputs(gen):
    G = torch.randn(30, 20, generator=gen)
    torch.testing.assert_close(msign(3.7 * G), msign(G), atol=1e-5, rtol=0)
    torch.testing.assert_close(msign(1e-5 * G), msign(G), atol=1e-5, rtol=0)


def test_dtype_is_preserved(gen):
    for dt in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        G = torch.randn(12, 8, generator=gen).to(dt)
        assert msign(G).dtype == dt
        assert msign(G, method="svd").dtype == dt


def test_cpu_path_equals_torch_muon_newton_schulz(gen):
    # Same normalisation, transposition and addmm sequence as torch.optim.Muon: bitwise equal.
    for shape in [(64, 48), (48, 64)]:
        G = torch.randn(shape, generator=gen)
        ours = msign(G, method="muon", steps=5, dtype=torch.bfloat16, eps=1e-7)
        theirs = _zeropower_via_newtonschulz(G, (3.4445, -4.7750, 2.0315), 5, 1e-7)
        assert torch.equal(ours, theirs.to(ours.dtype))


@pytest.mark.gpu
def test_cuda_path_runs_the_triton_steps(gen):
    G = torch.randn(300, 200, generator=gen)
    ref = msign(G)  # CPU: float32 torch reference steps
    out = msign(G.cuda())  # CUDA default: bfloat16 steps on the SYRK kernels
    assert out.is_cuda and out.dtype == torch.float32
    assert _rel(out.cpu(), ref) <= 2e-2
    assert _rel(msign(G.cuda(), dtype=torch.float32).cpu(), ref) <= 1e-4
    Gb = torch.randn(3, 64, 96, generator=gen)
    assert _rel(msign(Gb.cuda()).cpu(), msign(Gb)) <= 2e-2


def test_newton_schulz_with_custom_coefficients(gen):
    G = torch.randn(30, 20, generator=gen, dtype=torch.float64) + 3 * torch.eye(30, 20)
    # Cubic Newton-Schulz as a quintic with c = 0 converges on a well-conditioned matrix.
    Q = newton_schulz(G, [(1.5, -0.5, 0.0)] * 40, dtype=torch.float64)
    assert _rel(Q, _polar64(G)) <= 1e-10
    with pytest.raises(ValueError, match="three numbers"):
        newton_schulz(G, [(1.0, 2.0)])
    with pytest.raises(ValueError, match="finite"):
        newton_schulz(G, [(1.0, float("nan"), 0.0)])
    with pytest.raises(ValueError, match="margin"):
        newton_schulz(G, [(1.5, -0.5, 0.0)], margin=0.5)
    with pytest.raises(ValueError, match="eps"):
        newton_schulz(G, [(1.5, -0.5, 0.0)], eps=0.0)


def test_auto_method_rule(gen):
    assert auto_method(torch.randn(40, 30, generator=gen, dtype=torch.float64)) == "svd"
    assert auto_method(torch.randn(1024, 32, generator=gen)) == "gram"
    assert auto_method(torch.randn(4, 1024, 32, generator=gen)) == "gram"
    assert auto_method(torch.randn(40, 30, generator=gen)) == "svd"
    assert auto_method(torch.randn(64, 64, generator=gen)) == "polar_express"
    assert auto_method(torch.randn(4, 40, 30, generator=gen)) == "polar_express"
    for shape in ((640, 32), (40, 30)):
        G = torch.randn(shape, generator=gen)
        assert _rel(msign(G, method="auto"), _polar64(G)) <= 1e-5  # took an exact route
    G = torch.randn(3, 40, 30, generator=gen)
    torch.testing.assert_close(msign(G, method="auto", steps=4), msign(G, steps=4))


def test_bad_arguments_raise_value_errors(gen):
    G = torch.randn(6, 4, generator=gen)
    with pytest.raises(ValueError, match="valid methods: 'auto', 'svd', 'eigh', 'gram', 'muon'"):
        msign(G, method="qr")
    with pytest.raises(ValueError, match="steps applies"):
        msign(G, method="svd", steps=3)
    with pytest.raises(ValueError, match="steps"):
        msign(G, steps=-1)
    with pytest.raises(ValueError, match="dtype"):
        msign(G, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"shape \(\.\.\., m, n\)"):
        msign(torch.randn(5, generator=gen))
    with pytest.raises(ValueError, match="floating"):
        msign(torch.ones(3, 3, dtype=torch.int64))
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        msign([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="non-finite"):
        svd_polar(torch.full((2, 2), float("nan")))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(40, 30), (23, 57)])
def test_exact_routes_agree_on_rank_deficient_input(dtype, shape):
    # rank 5 by construction: the polar factor is U_5 V_5^T of the exact factors. The SVD
    # returns the 25+ exact zeros as round-off (~eps * s_max); mapping those to 1, as a
    # "zero only exactly-zero values" rule did, gave a relative error of ~2 here.
    gen = torch.Generator().manual_seed(7)
    m, n = shape
    A = torch.randn(m, 5, generator=gen, dtype=torch.float64)
    B = torch.randn(5, n, generator=gen, dtype=torch.float64)
    G64 = A @ B
    U, s, Vh = torch.linalg.svd(G64, full_matrices=False)
    ref = U[:, :5] @ Vh[:5]
    G = G64.to(dtype)
    # error model: rounding G to dtype moves the rank-5 polar factor by about
    # eps(dtype) * s_max / s_5 (the gap to the zero block); a generous 100x covers the sizes
    cond = float(s[0] / s[4])
    tol = 100 * torch.finfo(dtype).eps * cond
    for route in ("svd", "gram"):
        Q = msign(G, method=route).to(torch.float64)
        err = float(torch.linalg.matrix_norm(Q - ref) / torch.linalg.matrix_norm(ref))
        assert err < tol, (route, err, tol)
    assert float(torch.linalg.matrix_norm(svd_polar(G).double() - ref)) < tol * 5**0.5
    # spectral_power at a = 0 keeps agreeing with the SVD polar factor
    torch.testing.assert_close(spectral_power(G, 0.0), svd_polar(G), atol=0, rtol=0)


def test_svd_polar_rejects_a_bad_rtol():
    G = torch.randn(4, 3)
    for bad in (-0.1, 1.0, float("nan"), True):
        with pytest.raises(ValueError, match="rtol"):
            svd_polar(G, rtol=bad)


@pytest.mark.parametrize("margin", [1.0, 1.01])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_in_place_normalisation_gives_the_same_bits(margin, dtype, gen):
    """``inplace=True`` divides the caller's tensor by the same denominator the copying path
    uses (``(norm * margin).clamp_min(eps)``, the multiplication skipped only where it is
    exact), so the values are bitwise those of the out-of-place formula."""
    X = torch.randn(3, 37, 53, generator=gen).to(dtype)
    norm = torch.linalg.vector_norm(X, dim=(-2, -1), keepdim=True)
    expected = X / (norm * margin).clamp_min(1e-7)
    copy = X.clone()
    out = normalize_frobenius(copy, margin=margin, inplace=True)
    assert out.data_ptr() == copy.data_ptr()
    assert torch.equal(out, expected)
    assert torch.equal(normalize_frobenius(X, margin=margin), expected)


def test_overwrite_input_is_opt_in_and_changes_no_result(gen):
    """A bfloat16 input already in the iteration dtype is left intact unless the caller
    allows overwriting; with it, the result is bit for bit the same (torch Muon's too)."""
    for shape in [(37, 53), (53, 37), (2, 19, 23)]:
        G = torch.randn(shape, generator=gen).to(torch.bfloat16)
        kept = G.clone()
        ours = msign(G, method="muon", steps=5, dtype=torch.bfloat16)
        assert torch.equal(G, kept)  # not overwritten by default
        again = msign(G.clone(), method="muon", steps=5, dtype=torch.bfloat16, overwrite_input=True)
        assert torch.equal(again, ours)
        if len(shape) == 2:
            theirs = _zeropower_via_newtonschulz(kept, (3.4445, -4.7750, 2.0315), 5, 1e-7)
            assert torch.equal(ours, theirs)
        # a float32 input is converted first, so never overwritten
        G32 = torch.randn(shape, generator=gen)
        k32 = G32.clone()
        msign(G32, method="muon", steps=5, dtype=torch.bfloat16, overwrite_input=True)
        assert torch.equal(G32, k32)


def test_checked_table_is_coefficients_for_checked_once():
    from shared_core.polar import checked_table, coefficients_for

    for name in NS_TABLES:
        for steps in (None, 0, 3, 9):
            t = checked_table(name, steps)
            assert [tuple(c) for c in t] == [tuple(c) for c in coefficients_for(name, steps)]
            assert checked_table(name, steps) is t  # cached: the checks run once
    # bad arguments raise as coefficients_for does (True is not the int 1, a list is unhashable)
    for steps in (True, -1, [3], 2.0):
        with pytest.raises(ValueError, match="steps"):
            checked_table("muon", steps)
    with pytest.raises(ValueError, match="no-such-table"):
        checked_table("no-such-table", 3)


@pytest.mark.parametrize("case", ["overwrite", "converted", "plain"])
def test_gradients_flow_through_newton_schulz(case, gen):
    """The in-place normalisation is skipped while autograd records (the norm's backward
    needs its input unchanged), whether the caller allowed overwriting or a dtype conversion
    made the copy. Directional derivative of <W, NS(G)> against central differences, error
    model: O(h^2) truncation plus (input rounding) / h, i.e. 1e-6 relative in float64 input
    with h = 1e-5 and 1e-3 in float32 input with h = 1e-2 (iterated in float64)."""
    dt = torch.float32 if case == "converted" else torch.float64
    G = torch.randn(7, 5, dtype=torch.float64, generator=gen).to(dt)
    W = torch.randn(7, 5, dtype=torch.float64, generator=gen)
    E = torch.randn(7, 5, dtype=torch.float64, generator=gen).to(dt)
    C = [(1.875, -1.25, 0.375)] * 3

    def f(x):
        y = newton_schulz(x, C, dtype=torch.float64, overwrite_input=case == "overwrite")
        return (W * y.double()).sum()

    Gr = G.clone().requires_grad_(True)
    f(Gr.clone() if case == "overwrite" else Gr).backward()
    h, tol = (1e-2, 1e-3) if dt == torch.float32 else (1e-5, 1e-6)
    fd = (f(G + h * E) - f(G - h * E)) / (2 * h)
    got = float((Gr.grad.double() * E.double()).sum())
    assert abs(got - float(fd)) < tol * (1 + abs(float(fd)))
