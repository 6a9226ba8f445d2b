r"""The polar factor (matrix sign) :math:`\mathrm{msign}(G) = UV^\top`, :math:`G = U\Sigma V^\top`.

:math:`UV^\top` is the orthogonal (semi-orthogonal, for rectangular ``G``) matrix nearest to
``G``, the maximiser of :math:`\langle G, D\rangle` over the spectral-norm unit ball (so
:math:`-\mathrm{msign}(G)` is the spectral-norm LMO, Muon's update), and for symmetric ``G``
the matrix sign :math:`V\,\mathrm{sign}(\Lambda)V^\top`. For rank-deficient ``G`` the factor is
not unique; the exact paths map singular values (eigenvalues) that are exactly zero to zero and
complete the remaining, merely tiny ones to unit length as the SVD (eigh) returns them, so the
result is semi-orthogonal whenever no singular value is exactly zero, and ``msign(0) = 0``.
Newton-Schulz maps tiny singular values to tiny ones.

Routes, and when each is the right one:

``method=<table name>`` (default ``"polar_express"``, 6 steps)
    Newton-Schulz with a coefficient table (:mod:`shared_core.polar.coefficients`). Only
    matmuls, so it is fast on a GPU, batched, and fine in bfloat16; but it is approximate: the
    singular values come out in a band around 1 whose width depends on the table, the steps
    and how small the normalised singular values are (see the accuracy report). On CUDA the
    steps run the Triton SYRK kernels.
``method="svd"``
    Exact, through ``torch.linalg.svd`` in float32 (float64 for float64 input, or on
    request). On a CPU it costs about as much as six float32 Newton-Schulz steps at 1024^2 and
    is faster for tall-skinny matrices; on a GPU the SVD is far slower than matmuls.
``method="eigh"``
    Exact matrix sign of symmetric input via ``torch.linalg.eigh`` (cheaper than the SVD).
``method="gram"``
    Exact polar factor of an elongated matrix through the eigendecomposition of its small
    Gram matrix, formed in float64 (:func:`gram_polar`): two thin matmuls and an ``eigh`` of
    ``min(m, n)`` squared. For LoRA-shaped blocks (4096x64) on a CPU it is several times faster
    than both the SVD and five bfloat16 Newton-Schulz steps, at SVD accuracy; singular values
    below ``max(m, n) * eps`` of the largest map to 0 (the rule of a masked SVD).
``method="auto"``
    The exact route where it is not slower, Newton-Schulz elsewhere (:func:`auto_method`):
    float64 input goes to the SVD (Newton-Schulz would throw the precision away); on the CPU an
    elongated block (aspect ratio >= 16, batched or not) goes to the Gram route, and a single
    matrix with ``min(m, n) <= 32`` to the SVD; everything else, and every GPU case, to the
    default Newton-Schulz table. Measured on a 2-core AVX-512 CPU in float32 (one thread where
    noted): 4096x64 Gram ~1.5 ms vs SVD 3-9 ms vs five bf16 NS steps 2.1 ms; 4096x8 ~80 us vs
    ~115 us vs ~430 us; 1024x1024 SVD 0.20 s vs six NS steps 0.19 s; 16 batched 64x64 NS
    0.9 ms vs SVD 4.2 ms. This is the one "auto" policy of the suite (imuon's ``polar="auto"``
    is this function).

Example:
    >>> G = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))
    >>> Q = msign(G, method="svd")
    >>> torch.allclose(Q.T @ Q, torch.eye(32), atol=1e-5)
    True
    >>> float((msign(G) - Q).norm() / Q.norm()) < 0.05
    True
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._checks import check_finite as _check_finite
from ._checks import check_matrix, check_symmetric, exact_dtype
from ._svd import default_rtol, significant, svd_apply
from .coefficients import DEFAULT_TABLE, NS_TABLES, table_info
from .newton_schulz import checked_table, newton_schulz

__all__ = ["METHODS", "auto_method", "eigh_sign", "gram_polar", "msign", "svd_polar"]


def _check_rtol(rtol: float) -> float:
    if isinstance(rtol, bool) or not isinstance(rtol, int | float) or not 0 <= rtol < 1:
        raise ValueError(f"rtol must be a number in [0, 1), got {rtol!r}")
    return float(rtol)


#: Every value ``msign`` accepts for ``method``.
METHODS: tuple[str, ...] = ("auto", "svd", "eigh", "gram", *NS_TABLES)

#: On the CPU, blocks at least this elongated go to the Gram route under ``method="auto"``.
_AUTO_ELONGATED = 16
#: On the CPU, single matrices with a side at most this small go to the SVD under "auto".
_AUTO_SVD_SMALL = 32


def svd_polar(
    G: Tensor,
    *,
    dtype: torch.dtype | None = None,
    check_finite: bool = True,
    rtol: float | None = None,
) -> Tensor:
    r"""Exact polar factor :math:`UV^\top` by the SVD.

    Singular values at or below ``rtol`` times the largest map to 0, the same rule as
    :func:`gram_polar`: on rank-deficient input the SVD returns round-off (~eps times the
    largest) for the exact zeros, and mapping those to 1 would add arbitrary directions.

    Args:
        G: ``(..., m, n)`` real floating tensor.
        dtype: float32 or float64 (``None``: float64 for float64 input, else float32).
        check_finite: raise ``ValueError`` on NaN/inf input.
        rtol: relative cut-off (default ``max(m, n)`` times the epsilon of the computation's
            dtype, the rule of ``numpy.linalg.matrix_rank``).

    Returns:
        Shaped and typed like ``G``.

    Example:
        >>> svd_polar(torch.tensor([[2.0, 0.0], [0.0, -3.0]]))
        tensor([[ 1.,  0.],
                [ 0., -1.]])
    """
    G = check_matrix(G, "svd_polar")
    cd = exact_dtype(G, dtype)
    if check_finite:
        _check_finite(G, "svd_polar")
    m, n = G.shape[-2:]
    cut = default_rtol(m, n, cd) if rtol is None else _check_rtol(rtol)
    return svd_apply(G, lambda s: significant(s, cut).to(s.dtype), cd)


def gram_polar(
    G: Tensor,
    *,
    dtype: torch.dtype | None = None,
    check_finite: bool = True,
    rtol: float | None = None,
) -> Tensor:
    r"""Polar factor :math:`UV^\top` of ``G`` from the eigendecomposition of its Gram matrix.

    For :math:`m \ge n`, :math:`G^\top G = V\Sigma^2V^\top` and
    :math:`UV^\top = G\,V\Sigma^{-1}V^\top` (wide input goes through :math:`G^\top`). The
    Gram matrix and its ``eigh`` are computed in float64 whatever the input: squaring the
    singular values squares the condition number, and a float64 Gram resolves a singular value
    ``t`` times the largest to a relative error of about ``max(m, n) * eps64 / t**2`` (1e-6 at
    ``t = 1e-3``, for float32 input far below its own round-off at the default cut-off).
    Singular values at or below the cut-off times the largest are treated as zero and map to 0,
    like a masked SVD (directions of numerically-zero singular values are noise and would leak
    out of ``G``'s column space); the cut-off never goes below ``4 * sqrt(max(m, n) * eps64)``,
    the Gram's own resolution. For float64 input that needs every singular value, use the
    SVD. The product with ``G`` is taken in float64 too, so float32 input gets a result
    accurate to its own round-off whatever its condition number (a float32 product would add
    an error of ``eps32`` times the condition number).

    Args:
        G: ``(..., m, n)`` real floating tensor.
        dtype: accepted for symmetry with the other exact routes (float32 or float64); the
            computation is float64 either way and the result has ``G``'s dtype.
        check_finite: raise ``ValueError`` on NaN/inf input.
        rtol: relative cut-off on the singular values (default ``max(m, n)`` times the
            machine epsilon of ``G``'s dtype, float32's for half precision).

    Returns:
        Shaped and typed like ``G``.

    Example:
        >>> G = torch.randn(200, 5, generator=torch.Generator().manual_seed(0))
        >>> torch.allclose(gram_polar(G), svd_polar(G), atol=1e-5)
        True
    """
    G = check_matrix(G, "gram_polar")
    exact_dtype(G, dtype)  # validates the request
    if check_finite:
        _check_finite(G, "gram_polar")
    m, n = G.shape[-2:]
    if min(m, n) == 0:
        return torch.zeros_like(G)
    rtol = default_rtol(m, n, G.dtype) if rtol is None else _check_rtol(rtol)
    rtol = max(rtol, 4 * math.sqrt(max(m, n) * torch.finfo(torch.float64).eps))
    wide = m < n
    X = G.mT if wide else G
    X64 = X.to(torch.float64)
    lam, V = torch.linalg.eigh(X64.mT @ X64)
    s = lam.clamp_min(0).sqrt()
    keep = significant(s, rtol)
    inv = torch.where(keep, 1.0 / torch.where(keep, s, torch.ones_like(s)), torch.zeros_like(s))
    W = (V * inv.unsqueeze(-2)) @ V.mT
    out = X64 @ W
    return (out.mT if wide else out).to(G.dtype)


def eigh_sign(
    G: Tensor,
    *,
    dtype: torch.dtype | None = None,
    check_finite: bool = True,
    rtol: float | None = None,
) -> Tensor:
    r"""Exact matrix sign :math:`V\,\mathrm{sign}(\Lambda)V^\top` of symmetric ``G`` by ``eigh``.

    Eigenvalues that are exactly zero map to 0 (``sign(0) = 0``).

    Args:
        G: ``(..., n, n)`` symmetric real floating tensor.
        dtype: float32 or float64 (``None``: float64 for float64 input, else float32).
        check_finite: raise ``ValueError`` on NaN/inf input.
        rtol: symmetry tolerance (default: square root of the dtype's epsilon).

    Returns:
        Shaped and typed like ``G``.

    Raises:
        ValueError: for non-square or non-symmetric input.

    Example:
        >>> S = eigh_sign(torch.tensor([[0.0, 2.0], [2.0, 0.0]]))
        >>> torch.allclose(S, torch.tensor([[0.0, 1.0], [1.0, 0.0]]), atol=1e-6)
        True
    """
    G = check_matrix(G, "eigh_sign", square=True)
    cd = exact_dtype(G, dtype)
    if check_finite:
        _check_finite(G, "eigh_sign")
    n = G.shape[-1]
    if n == 0:
        return torch.zeros_like(G)
    X = G.to(cd)
    check_symmetric(X, "eigh_sign", rtol)
    lam, V = torch.linalg.eigh((X + X.mT) / 2)
    sgn = torch.sign(lam)
    return ((V * sgn.unsqueeze(-2)) @ V.mT).to(G.dtype)


def auto_method(G: Tensor) -> str:
    """The route ``method="auto"`` takes for ``G`` (see the module docstring for the rule and
    its timings): ``"svd"``, ``"gram"`` or the default Newton-Schulz table."""
    if G.dtype == torch.float64:
        return "svd"
    m, n = G.shape[-2:]
    small, big = min(m, n), max(m, n)
    if G.device.type == "cpu":
        if big >= _AUTO_ELONGATED * max(small, 1):
            return "gram"
        if G.ndim == 2 and small <= _AUTO_SVD_SMALL:
            return "svd"
    return DEFAULT_TABLE


def msign(
    G: Tensor,
    method: str | None = None,
    steps: int | None = None,
    dtype: torch.dtype | None = None,
    *,
    eps: float = 1e-7,
    check_finite: bool = True,
    overwrite_input: bool = False,
) -> Tensor:
    r"""Polar factor :math:`UV^\top` of ``G`` (matrix sign for symmetric ``G``), batched.

    Args:
        G: ``(..., m, n)`` real floating tensor; leading dimensions are a batch.
        method: a table name of :data:`shared_core.polar.NS_TABLES` (Newton-Schulz), ``"svd"``,
            ``"gram"`` (elongated input), ``"eigh"`` (symmetric input) or ``"auto"``; ``None``
            is the default table ``"polar_express"``.
        steps: Newton-Schulz steps (``None``: the table's default; 6 for Polar Express, 5 for
            ``"muon"``); not accepted by ``"svd"``/``"gram"``/``"eigh"``.
        dtype: computation dtype. Newton-Schulz: ``None`` is bfloat16 on CUDA and float32
            elsewhere; float32/float64/float16 on request. SVD/Gram/eigh: float32 or float64
            (``None``: float64 for float64 input, else float32).
        eps: floor of the Frobenius normalisation's denominator (Newton-Schulz).
        check_finite: raise ``ValueError`` on NaN/inf input (on CUDA this costs one host
            sync); with ``False`` non-finite input gives non-finite output.
        overwrite_input: ``G`` may be overwritten (Newton-Schulz normalises it in place when
            it is already in the iteration dtype; the exact routes ignore it). Same result.

    Returns:
        A tensor shaped and typed like ``G``.

    Raises:
        ValueError: unknown method (the message lists the valid ones), bad ``steps`` or
            ``dtype``, non-finite input, non-symmetric input to ``"eigh"``.

    Example:
        >>> G = torch.randn(3, 40, 24, generator=torch.Generator().manual_seed(1))
        >>> Q = msign(G, "svd")
        >>> torch.allclose(Q.mT @ Q, torch.eye(24).expand(3, 24, 24), atol=1e-5)
        True
    """
    G = check_matrix(G, "msign")
    if method is None:
        method = DEFAULT_TABLE
    if not isinstance(method, str) or method not in METHODS:
        valid = ", ".join(repr(m) for m in METHODS)
        raise ValueError(f"unknown msign method {method!r}; valid methods: {valid}")
    if method == "auto":
        method = auto_method(G)
        if method in ("svd", "gram"):
            steps = None
            if dtype not in (None, torch.float32, torch.float64):
                dtype = None
    if method in ("svd", "eigh", "gram"):
        if steps is not None:
            raise ValueError(f"steps applies to Newton-Schulz tables only, not to {method!r}")
        if method == "svd":
            return svd_polar(G, dtype=dtype, check_finite=check_finite)
        if method == "gram":
            return gram_polar(G, dtype=dtype, check_finite=check_finite)
        return eigh_sign(G, dtype=dtype, check_finite=check_finite)
    info = table_info(method)
    return newton_schulz(
        G,
        checked_table(method, steps),
        margin=info.margin,
        eps=eps,
        dtype=dtype,
        check_finite=check_finite,
        overwrite_input=overwrite_input,
    )
