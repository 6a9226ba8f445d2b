"""SPD matrix functions via eigh, against scipy.linalg in float64, and their input checks."""

import numpy as np
import pytest
import scipy.linalg as sla
import torch

from shared_core.polar import expm_sym, inv_sqrtm, logm_sym, powm_sym, sqrtm

# tolerances here follow an error model; `nox -s numerics` reruns them on every BLAS path
pytestmark = pytest.mark.numerics


def _spd(n, gen, batch=(), cond=50.0):
    Q, _ = torch.linalg.qr(torch.randn(*batch, n, n, generator=gen, dtype=torch.float64))
    lam = torch.logspace(0, np.log10(cond), n, dtype=torch.float64)
    return (Q * lam.unsqueeze(-2)) @ Q.mT


def _sym(n, gen, batch=()):
    B = torch.randn(*batch, n, n, generator=gen, dtype=torch.float64)
    return (B + B.mT) / 2


def test_sqrtm_squares_back_and_matches_scipy(gen):
    X = _spd(17, gen)
    R = sqrtm(X)
    torch.testing.assert_close(R @ R, X, atol=1e-11, rtol=0)
    torch.testing.assert_close(R, R.T, atol=0, rtol=0)
    np.testing.assert_allclose(R.numpy(), np.real(sla.sqrtm(X.numpy())), atol=1e-10)


def test_inv_sqrtm_inverts_sqrtm(gen):
    X = _spd(17, gen, batch=(3,))
    eye = torch.eye(17, dtype=torch.float64).expand(3, 17, 17)
    torch.testing.assert_close(inv_sqrtm(X) @ sqrtm(X), eye, atol=1e-11, rtol=0)
    W = inv_sqrtm(X)
    torch.testing.assert_close(W @ X @ W, eye, atol=1e-10, rtol=0)  # whitening


def test_expm_logm_round_trip_and_scipy(gen):
    S = _sym(15, gen)
    E = expm_sym(S)
    np.testing.assert_allclose(E.numpy(), sla.expm(S.numpy()), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(logm_sym(E), S, atol=1e-10, rtol=0)
    X = _spd(15, gen)
    np.testing.assert_allclose(logm_sym(X).numpy(), np.real(sla.logm(X.numpy())), atol=1e-9)


def test_powm_sym(gen):
    X = _spd(12, gen, batch=(2, 2))
    torch.testing.assert_close(powm_sym(X, 0.5), sqrtm(X), atol=1e-12, rtol=0)
    torch.testing.assert_close(powm_sym(X, -1.0), torch.linalg.inv(X), atol=1e-10, rtol=0)
    torch.testing.assert_close(powm_sym(X, 0.3) @ powm_sym(X, 0.7), X, atol=1e-10, rtol=0)
    x0 = X[0, 0].numpy()
    np.testing.assert_allclose(
        powm_sym(X[0, 0], 1 / 3).numpy(),
        np.real(sla.fractional_matrix_power(x0, 1 / 3)),
        atol=1e-10,
    )


def test_float32_and_half_inputs_keep_their_dtype(gen):
    X = _spd(10, gen).float()
    R = sqrtm(X)
    assert R.dtype == torch.float32
    torch.testing.assert_close(R @ R, X, atol=1e-4, rtol=1e-4)
    assert sqrtm(X.bfloat16()).dtype == torch.bfloat16
    assert expm_sym(X.half()).dtype == torch.float16


@pytest.mark.parametrize("fn", [sqrtm, inv_sqrtm, logm_sym, lambda X: powm_sym(X, 0.25)])
def test_positive_definiteness_is_required(fn, gen):
    S = _sym(8, gen)  # indefinite
    with pytest.raises(ValueError, match="positive-definite"):
        fn(S)
    singular = torch.zeros(4, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="positive-definite"):
        fn(singular)


def test_expm_takes_any_symmetric(gen):
    S = _sym(6, gen) - 2 * torch.eye(6, dtype=torch.float64)  # mostly negative spectrum
    assert float(torch.linalg.eigvalsh(S)[0]) < 0
    E = expm_sym(S)
    assert bool((torch.linalg.eigvalsh(E) > 0).all())
    np.testing.assert_allclose(E.numpy(), sla.expm(S.numpy()), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("fn", [sqrtm, inv_sqrtm, logm_sym, expm_sym])
def test_bad_inputs_raise(fn, gen):
    A = _spd(6, gen)
    A[0, 1] += 0.5  # no longer symmetric
    with pytest.raises(ValueError, match="symmetric"):
        fn(A)
    with pytest.raises(ValueError, match="square"):
        fn(torch.randn(3, 4, generator=gen))
    with pytest.raises(ValueError, match=r"shape \(\.\.\., m, n\)"):
        fn(torch.randn(4, generator=gen))
    B = _spd(4, gen)
    B[1, 1] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        fn(B)
    with pytest.raises(ValueError, match="float32 or float64"):
        fn(_spd(4, gen), dtype=torch.bfloat16)


def test_powm_rejects_bad_exponent(gen):
    for a in (float("inf"), None):
        with pytest.raises(ValueError, match="exponent"):
            powm_sym(_spd(3, gen), a)


def test_symmetry_tolerance_accepts_round_off(gen):
    B = torch.randn(50, 30, generator=gen)
    X = B @ B.T + torch.eye(50)  # float32 product: symmetric up to round-off
    assert torch.isfinite(sqrtm(X)).all()
