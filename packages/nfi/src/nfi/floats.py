r"""Absorption in floating-point addition: when ``a + b`` rounds back to exactly ``a``.

A binary floating-point format with ``t`` significand bits (the implicit leading bit included:
bf16 8, fp16 11, fp32 24, fp64 53) represents a normal number
:math:`a = m\,2^{e-t+1}` with an integer :math:`2^{t-1} \le |m| < 2^t`. Its neighbours are
:math:`2^{e-t+1}` away (the *spacing* or ulp), except just below a power of two, where the
spacing halves. Round-to-nearest-even maps :math:`a + b` back to :math:`a` exactly when
:math:`b` lies within half a spacing of :math:`a` on its side, ties going to the neighbour with
an even :math:`m`:

.. math::

    \mathrm{fl}(a + b) = a \iff |b| < \tfrac12\,\mathrm{spacing}_{\pm}(a)
    \ \text{ or }\ \bigl(|b| = \tfrac12\,\mathrm{spacing}_{\pm}(a)
    \text{ and } m \text{ even}\bigr),

with :math:`\mathrm{spacing}_{+}` the gap away from zero and :math:`\mathrm{spacing}_{-}` the gap
towards zero. At :math:`a = 1` this reads: ``1 + s`` is lost for :math:`0 \le s \le u`, with
the unit roundoff :math:`u = 2^{-t}` (the tie :math:`s = u` rounds to the even ``1``). That
single fact is the whole cross-entropy threshold of :mod:`nfi.thresholds`.

The same rule says when an optimizer update is lost: ``w - lr * g`` is ``w`` when
``lr * g`` is under half a spacing of ``w`` (:func:`absorbed_update_mask`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "FLOAT_DTYPES",
    "absorbed_update_mask",
    "absorbs",
    "absorption_limits",
    "check_float_dtype",
    "significand_bits",
    "unit_roundoff",
]

#: The floating dtypes this package knows, in increasing precision.
FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


def check_float_dtype(dtype: torch.dtype) -> torch.dtype:
    """Return ``dtype`` if it is one of :data:`FLOAT_DTYPES`, else raise a ``ValueError``."""
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"dtype must be one of bfloat16, float16, float32, float64; got {dtype!r}")
    return dtype


def significand_bits(dtype: torch.dtype) -> int:
    r"""Significand bits ``t`` of ``dtype``, implicit bit included: :math:`\epsilon = 2^{1-t}`.

    Example:
        >>> [significand_bits(d) for d in FLOAT_DTYPES]
        [8, 11, 24, 53]
    """
    eps = torch.finfo(check_float_dtype(dtype)).eps
    return 1 - round(math.log2(eps))


def unit_roundoff(dtype: torch.dtype) -> float:
    r"""The unit roundoff :math:`u = 2^{-t} = \epsilon/2`: the largest ``s`` with ``fl(1 + s) = 1``.

    Example:
        >>> unit_roundoff(torch.float32) == 2.0**-24
        True
    """
    return 2.0 ** -significand_bits(dtype)


def _exact_in(a: float, dtype: torch.dtype) -> float:
    a = float(a)
    if not math.isfinite(a) or a == 0.0:
        raise ValueError(f"a must be a finite nonzero number, got {a!r}")
    if torch.tensor(a, dtype=torch.float64).to(dtype).double().item() != a:
        raise ValueError(f"a = {a!r} is not exactly representable in {dtype}")
    if abs(a) < torch.finfo(dtype).tiny:
        raise ValueError(f"a = {a!r} is subnormal in {dtype}; only normal numbers are covered")
    return a


def absorption_limits(a: float, dtype: torch.dtype) -> tuple[float, float, bool]:
    r"""Half-spacings of ``a`` in ``dtype`` towards zero and away from zero, and the tie rule.

    Args:
        a: a finite, nonzero, normal number exactly representable in ``dtype``.
        dtype: one of :data:`FLOAT_DTYPES`.

    Returns:
        ``(h_down, h_up, tie_absorbed)``: an addend moving ``|a|`` towards zero is lost iff
        its size is below ``h_down`` (or equal and ``tie_absorbed``); away from zero likewise
        with ``h_up``. ``tie_absorbed`` is true when ``a``'s significand is even.

    Example:
        >>> absorption_limits(1.0, torch.float32) == (2.0**-25, 2.0**-24, True)
        True
    """
    check_float_dtype(dtype)
    a = _exact_in(a, dtype)
    t = significand_bits(dtype)
    mant, exp = math.frexp(abs(a))  # |a| = mant * 2**exp, mant in [1/2, 1)
    spacing = 2.0 ** (exp - t)
    m = round(mant * 2.0**t)  # the integer significand, 2**(t-1) <= m < 2**t
    spacing_down = spacing / 2 if m == 2 ** (t - 1) else spacing
    return spacing_down / 2, spacing / 2, m % 2 == 0


def absorbs(a: float, b: float, dtype: torch.dtype) -> bool:
    r"""Whether ``fl(a + b) == a`` in ``dtype`` (closed form; ``b`` given exactly as a float).

    ``b`` need not be representable in ``dtype``: the rule is about the exact sum rounded once,
    which is what an addition whose operand ``b`` comes from a wider accumulator does.

    Args:
        a: the large operand (see :func:`absorption_limits`).
        b: the small operand, finite.
        dtype: the format of the result.

    Returns:
        True when the addition is lost (``b == 0`` included).

    Example:
        >>> absorbs(1.0, 2.0**-24, torch.float32), absorbs(1.0, 2.0**-23, torch.float32)
        (True, False)
    """
    b = float(b)
    if not math.isfinite(b):
        raise ValueError(f"b must be finite, got {b!r}")
    h_down, h_up, tie = absorption_limits(a, dtype)
    if b == 0.0:
        return True
    h = h_up if (b > 0) == (a > 0) else h_down
    return abs(b) < h or (abs(b) == h and tie)


def absorbed_update_mask(param: Tensor, update: Tensor) -> Tensor:
    r"""Elementwise: is the update ``param + update`` lost in ``param``'s dtype?

    Computed by doing the addition in the parameter's own dtype, which is what an optimizer
    does; entries with a zero update are not counted as absorbed.

    Args:
        param: floating tensor.
        update: same shape (any floating dtype; it is cast to ``param``'s dtype first, as
            ``param.add_(update)`` would).

    Returns:
        Bool tensor, true where ``update != 0`` and ``param + update == param``.

    Example:
        >>> w = torch.tensor([1.0, 1.0]); absorbed_update_mask(w, torch.tensor([1e-9, 1e-3]))
        tensor([ True, False])
    """
    if not (param.is_floating_point() and update.is_floating_point()):
        raise TypeError(f"param and update must be floating, got {param.dtype}, {update.dtype}")
    if param.shape != update.shape:
        raise ValueError(
            f"shape mismatch: param {tuple(param.shape)}, update {tuple(update.shape)}"
        )
    upd = update.to(param.dtype)
    return (update != 0) & ((param + upd) == param)
