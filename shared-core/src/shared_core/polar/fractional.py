r"""Fractional spectral powers :math:`U\,\mathrm{diag}(x^a)\,V^\top`, from Muon (a=0) to SGD (a=1).

Normalisation (chosen so that every route and every ``a`` agree on one scale): the power is
taken of the Frobenius-normalised matrix,

.. math::

    \mathrm{spectral\_power}(G, a) = U\,\mathrm{diag}(x_i^{\,a})\,V^\top,
    \qquad x_i = s_i / \|G\|_F \in [0, 1],

so that ``a = 0`` is the polar factor :math:`UV^\top` (:func:`shared_core.polar.msign`), ``a = 1``
is :math:`G / \|G\|_F`, the singular values move monotonically in between, the result is
invariant to positive rescaling of ``G``, and its spectral norm is at most 1 for every ``a``.
Singular values that are exactly zero stay zero (also for ``a = 0``, as in ``msign``).

Two routes:

``method="svd"`` (exact)
    One SVD. ``a = 0`` returns bitwise the same tensor as ``msign(G, "svd")``.

``method="iterative"`` (matmuls only)
    With :math:`X = G/\|G\|_F` and the smaller Gram matrix :math:`A = X^\top X` (tall) or
    :math:`XX^\top` (wide), :math:`U\,\mathrm{diag}(x^a)V^\top = X A^{-q}` (or :math:`A^{-q}X`)
    with :math:`q = (1 - a)/2 \in [0, 1/2]`. The negative power comes from repeated square
    roots: the coupled Newton-Schulz iteration :math:`T = (3I - ZY)/2`, :math:`Y \leftarrow YT`,
    :math:`Z \leftarrow TZ` from :math:`Y = R, Z = I` converges to :math:`Y = R^{1/2}`,
    :math:`Z = R^{-1/2}` for eigenvalues in (0, 1]. Applied to :math:`R_0 = A/\|A\|_F`,
    :math:`R_1 = R_0^{1/2}, \dots` it yields :math:`Z_k = R_0^{-2^{-k}}`; the binary digits of
    ``q`` pick which :math:`Z_k` to multiply, and once :math:`R_k = I + E` is close to the
    identity the remaining fraction :math:`t \in [0, 1)` of the exponent is the binomial
    series :math:`(I + E)^{-t} = \sum_j \binom{-t}{j} E^j`. So no rounding of ``a`` happens.
    It needs ``G`` of full rank and not too ill-conditioned: the first square root takes
    about :math:`\log_{2.25}(1/\lambda_{\min})` iterations (:math:`\lambda = x^2`), and
    round-off grows with the condition number. Tested to agree with the SVD route to 1e-3
    (relative Frobenius) in float32 for condition numbers up to 100.

Example:
    >>> G = torch.randn(40, 30, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    >>> torch.allclose(spectral_power(G, 1.0), G / G.norm())
    True
    >>> P = spectral_power(G, 0.5, method="iterative")
    >>> bool((P - spectral_power(G, 0.5)).norm() / P.norm() < 1e-6)
    True
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._checks import check_finite as _check_finite
from ._checks import check_matrix, exact_dtype
from ._svd import default_rtol, significant, svd_apply

__all__ = ["spectral_power"]

_METHODS = ("svd", "iterative")


def _check_exponent(a: object) -> float:
    try:
        af = float(a)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"the exponent a must be a number in [0, 1], got {a!r}") from None
    if not (math.isfinite(af) and 0.0 <= af <= 1.0):
        raise ValueError(f"the exponent a must be in [0, 1], got {a!r}")
    return af


def _coupled_sqrt(R: Tensor, eye: Tensor, max_iter: int) -> tuple[Tensor, Tensor]:
    r"""``(R^{1/2}, R^{-1/2})`` of SPD ``R`` (eigenvalues in (0, 1]) by coupled Newton-Schulz."""
    floor = 8 * torch.finfo(R.dtype).eps * math.sqrt(R.shape[-1])
    Y, Z = R, eye.expand_as(R)
    prev = math.inf
    res = math.inf
    for _ in range(max_iter):
        P = Z @ Y
        # The Frobenius norm bounds every eigenvalue's residual, so a few slow small
        # eigenvalues cannot hide behind many converged ones.
        res = float(torch.linalg.matrix_norm(P - eye).max())
        # Converged, or at the round-off floor: in the quadratic regime (res < 1e-2) the
        # residual stops shrinking only there.
        if res <= floor or (res < 1e-2 and res >= 0.5 * prev):
            break
        if not math.isfinite(res):
            break
        prev = res
        T = 1.5 * eye - 0.5 * P
        Y = Y @ T
        Z = T @ Z
    if not res < 1e-2:
        raise ValueError(
            f"spectral_power(method='iterative'): the square-root iteration did not converge "
            f"(residual {res:.2e}, cap {max_iter} iterations); G is too ill-conditioned or "
            f"rank-deficient for {R.dtype}: use method='svd' or dtype=torch.float64"
        )
    return Y, Z


def _binomial_power(E: Tensor, t: float, eye: Tensor, enorm: float) -> Tensor:
    r""":math:`(I + E)^{t} = \sum_j \binom{t}{j} E^j` for small ``E`` (Horner), to round-off."""
    eps = torch.finfo(E.dtype).eps
    coefs = [1.0]
    j = 0
    while abs(coefs[-1]) * enorm**j > eps and j < 60:
        j += 1
        coefs.append(coefs[-1] * (t - j + 1) / j)
    out = coefs[-1] * eye.expand_as(E)
    for cj in reversed(coefs[:-1]):
        out = cj * eye + E @ out
    return out


def _spd_neg_power(A: Tensor, q: float, max_iter: int) -> Tensor:
    r""":math:`A^{-q}` for SPD ``A`` and ``q`` in (0, 1/2], by square roots (module docstring)."""
    n = A.shape[-1]
    eye = torch.eye(n, dtype=A.dtype, device=A.device)
    scale = torch.linalg.matrix_norm(A, keepdim=True)
    R = A / scale
    result = None
    rem = q
    for k in range(1, 64):
        Y, Z = _coupled_sqrt(R, eye, max_iter)
        bit = 2.0**-k
        if rem >= bit:
            result = Z if result is None else result @ Z
            rem -= bit
        R = Y
        if rem <= 0.0:
            break
        E = R - eye
        enorm = float(torch.linalg.matrix_norm(E).max())
        if enorm <= 0.25:
            tail = _binomial_power(E, -rem * 2.0**k, eye, enorm)
            result = tail if result is None else result @ tail
            break
    if result is None:  # pragma: no cover - needs q below 2**-63
        raise RuntimeError(f"spectral power: exponent {q!r} too small to resolve")
    return result * scale.pow(-q)


def _iterative_power(G: Tensor, a: float, dtype: torch.dtype, max_iter: int) -> Tensor:
    X = G.to(dtype)
    fro = torch.linalg.vector_norm(X, dim=(-2, -1), keepdim=True)
    nonzero = fro > 0
    X = X / torch.where(nonzero, fro, 1.0)
    if a == 1.0:
        return X.to(G.dtype)
    m, n = X.shape[-2:]
    tall = m >= n
    A = X.mT @ X if tall else X @ X.mT
    # Zero matrices: iterate on the identity instead (the output is zero either way).
    eye = torch.eye(A.shape[-1], dtype=dtype, device=A.device)
    A = torch.where(nonzero, A, eye)
    M = _spd_neg_power(A, (1.0 - a) / 2.0, max_iter)
    out = X @ M if tall else M @ X
    return out.to(G.dtype)


def spectral_power(
    G: Tensor,
    a: float,
    method: str = "svd",
    *,
    dtype: torch.dtype | None = None,
    check_finite: bool = True,
    max_iter: int = 100,
) -> Tensor:
    r"""Fractional spectral power :math:`U\,\mathrm{diag}((s_i/\|G\|_F)^a)\,V^\top`, batched.

    Args:
        G: ``(..., m, n)`` real floating tensor.
        a: exponent in ``[0, 1]``: 0 is ``msign(G)``, 1 is ``G / ||G||_F``.
        method: ``"svd"`` (exact) or ``"iterative"`` (matmuls; full-rank, moderately
            conditioned ``G``).
        dtype: float32 or float64 (``None``: float64 for float64 input, else float32).
        check_finite: raise ``ValueError`` on NaN/inf input.
        max_iter: iteration cap of each square root (``"iterative"``).

    Returns:
        Shaped and typed like ``G``.

    Raises:
        ValueError: ``a`` outside ``[0, 1]``, unknown method, bad dtype, non-finite input.

    Example:
        >>> G = torch.diag(torch.tensor([3.0, 4.0]))
        >>> spectral_power(G, 0.5)  # sqrt([0.6, 0.8])
        tensor([[0.7746, 0.0000],
                [0.0000, 0.8944]])
    """
    G = check_matrix(G, "spectral_power")
    af = _check_exponent(a)
    if method not in _METHODS:
        raise ValueError(
            f"unknown spectral_power method {method!r}; valid methods: 'svd', 'iterative'"
        )
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive int, got {max_iter!r}")
    cd = exact_dtype(G, dtype)
    if check_finite:
        _check_finite(G, "spectral_power")
    if min(G.shape[-2:]) == 0:
        return torch.zeros_like(G)
    if method == "iterative":
        return _iterative_power(G, af, cd, max_iter)

    cut = default_rtol(*G.shape[-2:], cd)

    def weights(s: Tensor) -> Tensor:
        # (s / fro)^0 is 1 even for a round-off singular value; masking by svd_polar's
        # cut-off keeps a = 0 equal to msign(method="svd") on rank-deficient input too.
        fro = torch.linalg.vector_norm(s, dim=-1, keepdim=True)
        return torch.where(significant(s, cut), (s / fro).pow(af), 0.0)

    return svd_apply(G, weights, cd)
