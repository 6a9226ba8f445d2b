r"""The Newton-Schulz iteration for the polar factor, for any table of odd quintics.

For :math:`G = U \Sigma V^\top`, each step :math:`X \leftarrow aX + (bA + cA^2)X` with
:math:`A = XX^\top` replaces every singular value ``s`` by :math:`p(s) = as + bs^3 + cs^5` and
keeps the singular vectors, so after the table's steps :math:`X = U f(\Sigma) V^\top` with
``f`` the composition of the quintics; a good table makes :math:`f \approx 1` on the
normalised spectrum, i.e. :math:`X \approx UV^\top`.

Three details, all as in ``torch.optim.Muon``'s loop so that the cost is the same:

- normalisation :math:`X_0 = G / \max(\|G\|_F \cdot \text{margin}, \text{eps})`, which puts
  every singular value in :math:`[0, 1/\text{margin}]` (the spectral norm is at most the
  Frobenius norm), maps zero to zero and never divides by zero;
- a tall matrix is transposed first so that ``A`` is the smaller Gram matrix
  (``min(m, n)`` squared);
- the iteration runs in a chosen dtype (bfloat16 by default on CUDA, float32 elsewhere).

On CUDA each step is ``torch.ops.shared_core.ns_step`` (Triton SYRK kernels,
:mod:`shared_core.kernels.ns_step`); elsewhere it is the plain-torch reference, two
``addmm`` per step like Muon's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from shared_core.kernels import HAS_TRITON
from shared_core.kernels.ns_step import ns_step_reference

from ._checks import check_finite as _check_finite
from ._checks import check_matrix, iteration_dtype
from .coefficients import coefficients_for

__all__ = [
    "newton_schulz",
    "newton_schulz_combination",
    "newton_schulz_spectra",
    "normalize_frobenius",
]

_KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def normalize_frobenius(
    X: Tensor,
    *,
    margin: float = 1.0,
    eps: float = 1e-7,
    check_finite: bool = True,
    inplace: bool = False,
) -> Tensor:
    r""":math:`X / \max(\|X\|_F \cdot \text{margin}, \text{eps})` per matrix (last two dims).

    Args:
        X: ``(..., m, n)`` tensor.
        margin: safety margin ``>= 1`` on the norm.
        eps: floor of the denominator (zero maps to zero).
        check_finite: raise ``ValueError`` on NaN/inf. The check reads the norm, which is
            computed anyway; when the norm overflows while every entry is finite, ``X`` is
            first rescaled by its largest entry (the polar factor is scale invariant).
        inplace: divide ``X`` itself (its values are overwritten): saves an allocation when
            the caller owns ``X``, as torch.optim.Muon's ``div_`` does. Same values either way.

    Returns:
        The normalised tensor, dtype of ``X`` (``X`` itself with ``inplace=True``).

    Example:
        >>> normalize_frobenius(torch.tensor([[3.0, 0.0], [0.0, 4.0]]))
        tensor([[0.6000, 0.0000],
                [0.0000, 0.8000]])
    """
    norm = torch.linalg.vector_norm(X, dim=(-2, -1), keepdim=True)
    if check_finite and not bool(torch.isfinite(norm).all()):
        _check_finite(X, "normalize_frobenius")
        X = X / X.abs().amax(dim=(-2, -1), keepdim=True)  # a copy: X is no longer the input
        norm = torch.linalg.vector_norm(X, dim=(-2, -1), keepdim=True)
        inplace = True
    # norm is this call's own tensor; a margin of 1 skips a multiplication that is exact
    denom = (norm if margin == 1 else norm * margin).clamp_min(eps)
    return X.div_(denom) if inplace else X / denom


class _Checked(tuple):
    """A coefficient table that passed :func:`_check_coefficients` (never re-checked)."""


def _check_coefficients(coefficients: Sequence[Sequence[float]]) -> tuple[tuple[float, ...], ...]:
    if type(coefficients) is _Checked:
        return coefficients
    out = []
    for i, abc in enumerate(coefficients):
        try:
            a, b, c = (float(v) for v in abc)
        except (TypeError, ValueError):
            raise ValueError(
                f"coefficients[{i}] must be three numbers (a, b, c), got {abc!r}"
            ) from None
        if not all(math.isfinite(v) for v in (a, b, c)):
            raise ValueError(f"coefficients[{i}] must be finite, got {abc!r}")
        out.append((a, b, c))
    return _Checked(out)


def checked_table(name: str, steps: int | None) -> tuple[tuple[float, ...], ...]:
    """:func:`shared_core.polar.coefficients_for` ``(name, steps)``, checked once and cached.

    The per-call checks of a hot loop's fixed table cost ~20 µs, about 2% of a 256²
    Newton-Schulz on a CPU; :func:`newton_schulz` does not re-check a table from here.

    Args:
        name: table name.
        steps: number of steps (``None``: the table's default).

    Returns:
        An immutable tuple of ``(a, b, c)`` tuples (the same object on every call).

    Raises:
        ValueError: as :func:`shared_core.polar.coefficients_for`.

    Example:
        >>> checked_table("muon", 2)
        ((3.4445, -4.775, 2.0315), (3.4445, -4.775, 2.0315))
        >>> checked_table("muon", 2) is checked_table("muon", 2)
        True
    """
    if isinstance(name, str) and (steps is None or type(steps) is int):
        return _cached_table(name, steps)
    return _check_coefficients(coefficients_for(name, steps))  # raises the documented error


@functools.lru_cache(maxsize=64)
def _cached_table(name: str, steps: int | None) -> tuple[tuple[float, ...], ...]:
    return _check_coefficients(coefficients_for(name, steps))


def newton_schulz(
    G: Tensor,
    coefficients: Sequence[Sequence[float]],
    *,
    margin: float = 1.0,
    eps: float = 1e-7,
    dtype: torch.dtype | None = None,
    check_finite: bool = True,
    overwrite_input: bool = False,
) -> Tensor:
    r"""Apply Newton-Schulz quintic steps to the Frobenius-normalised ``G``.

    Args:
        G: ``(..., m, n)`` real floating tensor; leading dimensions are a batch.
        coefficients: one ``(a, b, c)`` per step (see
            :func:`shared_core.polar.coefficients_for` for the named tables).
        margin: normalisation margin ``>= 1`` (1.01 for Polar Express).
        eps: floor of the normalising denominator.
        dtype: iteration dtype; ``None`` is bfloat16 on CUDA and float32 elsewhere.
        check_finite: raise ``ValueError`` on NaN/inf input (one scalar check; on CUDA a
            host sync). With ``False`` a non-finite input gives a non-finite output.
        overwrite_input: ``G`` may be overwritten (normalised in place when it is already
            in the iteration dtype), like SciPy's ``overwrite_a``: for a caller that made
            ``G`` as a copy, as torch.optim.Muon does. The result is the same.

    Returns:
        ``U f(Σ) V^T`` shaped like ``G``, in ``G``'s dtype.

    Example:
        >>> G = torch.diag(torch.tensor([1.0, 0.5]))
        >>> X = newton_schulz(G, [(1.875, -1.25, 0.375)] * 8)
        >>> torch.allclose(X, torch.eye(2), atol=1e-4)
        True
    """
    coeffs = _check_coefficients(coefficients)
    X, transposed = _normalised(
        G, margin, eps, dtype, check_finite, "newton_schulz", overwrite_input
    )
    step = _step_for(X)
    for a, b, c in coeffs:
        X = step(X, a, b, c)
    if transposed:
        X = X.mT
    return X.to(G.dtype)


def _normalised(
    G: Tensor,
    margin: float,
    eps: float,
    dtype: torch.dtype | None,
    check_finite: bool,
    what: str,
    overwrite_input: bool = False,
) -> tuple[Tensor, bool]:
    """Checks, the iteration dtype, the wide orientation and the normalisation: ``X_0``.

    The normalisation divides in place when ``X`` is this call's own copy (the dtype
    conversion made one) or the caller allowed ``G`` to be overwritten, and autograd is not
    recording through it.
    """
    G = check_matrix(G, what)
    if not (isinstance(margin, int | float) and math.isfinite(margin) and margin >= 1):
        raise ValueError(f"margin must be a finite number >= 1, got {margin!r}")
    if not (isinstance(eps, int | float) and math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")
    X = G.to(iteration_dtype(G, dtype))
    # in place only outside autograd: the norm's backward needs X as it was
    owned = (overwrite_input or X is not G) and not (X.requires_grad and torch.is_grad_enabled())
    transposed = X.shape[-2] > X.shape[-1]
    if transposed:
        X = X.mT
    X = normalize_frobenius(X, margin=margin, eps=eps, check_finite=check_finite, inplace=owned)
    return X, transposed


def _step_for(X: Tensor) -> Callable[[Tensor, float, float, float], Tensor]:
    if X.is_cuda and HAS_TRITON and X.dtype in _KERNEL_DTYPES:
        return torch.ops.shared_core.ns_step
    return ns_step_reference


def newton_schulz_spectra(
    s: Tensor, coefficients: Sequence[Sequence[float]], *, margin: float = 1.0
) -> Tensor:
    r"""The singular values of every Newton-Schulz iterate, in exact arithmetic (float64).

    Newton-Schulz keeps the singular vectors and maps each normalised singular value by the
    same odd polynomial per step, so the iterates of :func:`newton_schulz` are
    :math:`X_k = U f_k(\hat s) V^\top` with :math:`\hat s = s / (\|s\|_2\,\text{margin})` and
    :math:`f_k` the composition of the first ``k`` quintics (:math:`f_0(x) = x`). The
    normalisation's ``eps`` floor (which only acts on matrices of norm below ``eps``) and the
    rounding of the iteration dtype are not modelled.

    Args:
        s: ``(..., r)`` non-negative singular values.
        coefficients: the steps' ``(a, b, c)``, as for :func:`newton_schulz`.
        margin: the normalisation margin, as for :func:`newton_schulz`.

    Returns:
        ``(..., r, K + 1)`` float64: column ``k`` holds :math:`f_k(\hat s)`.

    Example:
        >>> f = newton_schulz_spectra(torch.tensor([3.0, 4.0]), [(1.5, -0.5, 0.0)])
        >>> f[:, 0].tolist(), [round(v, 4) for v in f[:, 1].tolist()]
        ([0.6, 0.8], [0.792, 0.944])
    """
    coeffs = _check_coefficients(coefficients)
    x = s.to(torch.float64)
    x = x / (torch.linalg.vector_norm(x, dim=-1, keepdim=True) * margin).clamp_min(1e-300)
    out = [x]
    for a, b, c in coeffs:
        x2 = x * x
        x = x * (a + x2 * (b + c * x2))
        out.append(x)
    return torch.stack(out, dim=-1)


def newton_schulz_combination(
    G: Tensor,
    coefficients: Sequence[Sequence[float]],
    weights: Tensor | Sequence[float],
    *,
    margin: float = 1.0,
    eps: float = 1e-7,
    dtype: torch.dtype | None = None,
    check_finite: bool = True,
) -> Tensor:
    r"""A linear combination of the Newton-Schulz iterates: :math:`\sum_k w_k X_k`.

    By :func:`newton_schulz_spectra` this is the spectral function
    :math:`U\,\mathrm{diag}\big(\sum_k w_k f_k(\hat s)\big)\,V^\top` of ``G``: with weights
    fitted to a target map of the singular values (e.g. :math:`\hat s^a`) it applies that map
    at the cost of :func:`newton_schulz` plus one scaled addition per iterate, without an SVD.
    The iterates are computed exactly as by :func:`newton_schulz` (same normalisation, dtype
    and step kernel) and summed in float32 (float64 for float64 input).

    Args:
        G: ``(..., m, n)`` real floating tensor.
        coefficients: ``K`` quintic steps ``(a, b, c)``.
        weights: ``K + 1`` numbers shared by every matrix (a sequence of floats: scaled
            additions, no device-to-host read) or a tensor of shape ``(K + 1,)`` or
            ``(..., K + 1)`` (one row per matrix of the batch); entry 0 multiplies the
            normalised input :math:`X_0`.
        margin, eps, dtype, check_finite: as for :func:`newton_schulz`.

    Returns:
        Shaped like ``G``; float64 for float64 input, else float32.

    Raises:
        ValueError: as :func:`newton_schulz`; ``weights`` of the wrong length or shape, or
            not finite.

    Example:
        >>> G = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        >>> C = [(1.5, -0.5, 0.0)] * 2
        >>> Y = newton_schulz_combination(G, C, [0.0, 0.0, 1.0])
        >>> torch.allclose(Y, newton_schulz(G, C, dtype=torch.float64))
        True
        >>> torch.equal(newton_schulz_combination(G, C, torch.tensor([0.0, 0.0, 1.0])), Y)
        True
    """
    coeffs = _check_coefficients(coefficients)
    X, transposed = _normalised(G, margin, eps, dtype, check_finite, "newton_schulz_combination")
    acc_dtype = torch.float64 if G.dtype == torch.float64 else torch.float32
    k1 = len(coeffs) + 1
    if isinstance(weights, Tensor):
        if weights.shape[-1:] != (k1,) or (
            weights.ndim > 1 and tuple(weights.shape[:-1]) != tuple(G.shape[:-2])
        ):
            raise ValueError(
                f"weights must have shape ({k1},) or G's batch + ({k1},) = "
                f"{(*G.shape[:-2], k1)}, got {tuple(weights.shape)}"
            )
        if check_finite and not bool(torch.isfinite(weights).all()):
            raise ValueError("newton_schulz_combination got non-finite weights")
        w = weights.to(device=G.device, dtype=acc_dtype)
        w = w.reshape(*w.shape[:-1], 1, 1, k1) if w.ndim > 1 else w
        scaled = [lambda Y, k=k: Y.to(acc_dtype) * w[..., k] for k in range(k1)]
    else:
        ws = [float(v) for v in weights]
        if len(ws) != k1 or not all(math.isfinite(v) for v in ws):
            raise ValueError(f"weights must be {k1} finite numbers, got {weights!r}")
        scaled = None
    step = _step_for(X)
    if scaled is not None:  # one row of weights per matrix: tensor products, no host read
        acc = scaled[0](X)
        for k, (a, b, c) in enumerate(coeffs, start=1):
            X = step(X, a, b, c)
            acc.add_(scaled[k](X))
    else:  # shared Python weights: scaled additions straight from the iteration dtype
        # a zero weight's iterate is not added (non-negative fits often zero the first ones:
        # a pass saved each); every weight zero keeps 0 * X_0, so a NaN input still shows
        first = next((k for k, v in enumerate(ws) if v != 0.0), 0)
        acc = X.to(acc_dtype, copy=True).mul_(ws[0]) if first == 0 else None
        for k, (a, b, c) in enumerate(coeffs, start=1):
            X = step(X, a, b, c)
            if k == first:
                acc = X.to(acc_dtype, copy=True).mul_(ws[k])
            elif k > first and ws[k] != 0.0:
                acc.add_(X, alpha=ws[k])
    return acc.mT if transposed else acc
