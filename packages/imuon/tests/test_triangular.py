"""The fixed-rank step's triangular solves by the inverse route (issue 34, part 3): as accurate
as ``solve_triangular`` at the factor conditionings the package supports (cond(M) up to 1e6 in
float32, 1e8 in float64), against a higher-precision reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from imuon.lmo import rsolve_triangular, triangular_inverse, use_inverse

pytestmark = pytest.mark.numerics
D = torch.float64


def _upper_r(m, r, kappa, dtype, g):
    """R of a tall factor A M with cond(M) = kappa, as the optimizer's frames produce it."""
    q1, _ = torch.linalg.qr(torch.randn(r, r, dtype=D, generator=g))
    q2, _ = torch.linalg.qr(torch.randn(r, r, dtype=D, generator=g))
    M = q1 @ torch.diag(torch.logspace(0, float(np.log10(kappa)), r, dtype=D)) @ q2
    a = (torch.randn(m, r, dtype=D, generator=g) @ M).to(dtype)
    return torch.linalg.qr(a)[1]


def _reference(x: torch.Tensor, r: torch.Tensor, upper: bool) -> np.ndarray:
    """x r^-1 for triangular r by column-wise substitution in extended precision (numpy's
    longdouble: 64-bit mantissa on x86, at least float64 elsewhere)."""
    xl, rl = x.double().numpy().astype(np.longdouble), r.double().numpy().astype(np.longdouble)
    y = np.zeros_like(xl)
    n = rl.shape[0]
    for j in range(n) if upper else reversed(range(n)):
        done = slice(0, j) if upper else slice(j + 1, n)
        y[:, j] = (xl[:, j] - y[:, done] @ rl[done, j]) / rl[j, j]
    return y


def _err(got: torch.Tensor, ref: np.ndarray) -> float:
    d = got.double().numpy().astype(np.longdouble) - ref
    return float(np.linalg.norm(d.astype(np.float64)) / np.linalg.norm(ref.astype(np.float64)))


@pytest.mark.parametrize(
    ("dtype", "kappa"),
    [(torch.float32, k) for k in (1.0, 1e2, 1e4, 1e6)]
    + [(torch.float64, k) for k in (1.0, 1e4, 1e8)],
)
@pytest.mark.parametrize(("m", "r"), [(517, 7), (1031, 33)])
def test_inverse_route_is_as_accurate_as_the_triangular_solve(dtype, kappa, m, r):
    g = torch.Generator().manual_seed(int(m + r + np.log10(kappa)))
    R = _upper_r(m, r, kappa, dtype, g)
    x = torch.randn(m, r, dtype=D, generator=g).to(dtype)
    assert use_inverse(m, r)  # these shapes take the inverse route
    eps = torch.finfo(dtype).eps
    for tri, upper in ((R, True), (R.mT, False)):  # lower: the momentum store, the way back
        ref = _reference(x, tri, upper)
        got = rsolve_triangular(tri, x, upper=upper)
        solve = torch.linalg.solve_triangular(tri, x, upper=upper, left=False)
        # The solve's normwise forward error is <= c r cond(R) eps but in practice ~eps; the
        # inverse (taken in float64) is rounded once to dtype and multiplied: one GEMM's
        # error, ~sqrt(r) eps. Required: no worse than twice the solve's error or
        # 8 sqrt(r) eps, whichever is larger.
        assert _err(got, ref) <= max(2 * _err(solve, ref), 8 * r**0.5 * eps), (upper,)
    # the optimizer reuses one inverse, R^-1, for R and R^T: as accurate there too
    reused = rsolve_triangular(R.mT, x, upper=False, inverse=triangular_inverse(R).mT)
    solve = torch.linalg.solve_triangular(R.mT, x, upper=False, left=False)
    ref = _reference(x, R.mT, False)
    assert _err(reused, ref) <= max(2 * _err(solve, ref), 8 * r**0.5 * eps)


def test_short_blocks_keep_the_solve_and_the_rule_is_shape_only():
    g = torch.Generator().manual_seed(2)
    R = _upper_r(40, 6, 1e3, torch.float32, g)
    x = torch.randn(9, 6, generator=g)  # 9 < 2 * 6: solve route
    assert not use_inverse(9, 6) and use_inverse(12, 6)
    # the same solve into a row-major output: bitwise what the solve route computes
    want = torch.linalg.solve_triangular(R, x, upper=True, left=False, out=torch.empty(9, 6))
    torch.testing.assert_close(rsolve_triangular(R, x, upper=True), want, atol=0, rtol=0)
    out = rsolve_triangular(R, torch.randn(30, 6, generator=g), upper=True)
    assert out.is_contiguous()
