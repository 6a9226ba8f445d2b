r"""When cross-entropy's correct-class gradient rounds to exactly zero.

Setting. Logits :math:`z \in \mathbb R^C`, target :math:`y`, :math:`p = \mathrm{softmax}(z)`,
:math:`\ell = -\log p_y`, :math:`\nabla_z \ell = p - e_y`. In exact arithmetic the gradient sums
to zero over classes, :math:`\sum_c (p_c - [c = y]) = 0`: this *zero-sum* property is what keeps
the mean of the classifier rows fixed (:mod:`nfi.dynamics`).

How frameworks compute it. The fused path (``log_softmax`` then ``nll``, which is what
``torch.nn.functional.cross_entropy`` does) shifts by the row maximum and forms

.. math:: S = \sum_j e^{z_j - z_{\max}}, \qquad \log p_c = z_c - z_{\max} - \log S,

and backpropagates :math:`g_c = w\,e^{\log p_c} - w\,[c = y]` (``w`` the reduction weight,
``1/N`` for the mean). When the target is the maximum, :math:`S = 1 + s` with
:math:`s = \sum_{j \ne y} e^{z_j - z_y}`. By :mod:`nfi.floats`, ``1 + s`` rounds to exactly
``1`` once :math:`s \le u = 2^{-t}`. Then :math:`\log p_y = 0`, :math:`e^0 = 1` and
:math:`g_y = w - w = 0` *exactly*, while every other :math:`g_j = w\,e^{z_j - z_y} > 0`
is a perfectly ordinary small number. The row then sums to :math:`w s > 0` instead of 0.

The threshold. Write :math:`\gamma = z_y - \log\sum_{j \ne y} e^{z_j}` for the *effective gap*
(so :math:`s = e^{-\gamma}`). If the sum :math:`S` is rounded once (a wide accumulator, or the
terms summed among themselves before meeting the 1), absorption happens exactly when

.. math:: \gamma \ge \gamma^\star = -\log u = t \log 2

(fp32: 16.64; bf16: 5.55; fp16: 7.62; fp64: 36.74). For the textbook case of one logit
:math:`\Delta` above :math:`C - 1` equal others, :math:`\gamma = \Delta - \log(C - 1)`, so

.. math:: \Delta^\star_{\mathrm{hi}}(C) = \log(C - 1) + t\log 2 .

If instead the terms are added one at a time into a running sum that already holds the 1,
each is lost on its own as soon as :math:`e^{-\Delta} \le u`:
:math:`\Delta^\star_{\mathrm{lo}} = t\log 2`, independent of :math:`C`. Every summation order
(SIMD lanes, trees, blocks) lies between these two: the 1 meets partial sums no smaller than one
term and no larger than all of them. Torch on CPU hits the upper end for bf16/fp16 (sums in an
fp32 accumulator, rounded once) and a lane-order-dependent point inside the bounds for fp32
and fp64 (16.64 for 10 classes on AVX-512: each term is lost on its own).

Which torch paths absorb: all of them that form :math:`p_y` or :math:`\log S` in the input's
dtype (``cross_entropy``, ``log_softmax`` + ``nll_loss``, ``log(softmax)``); computing the loss
in float64 only moves the threshold to fp64's. Label smoothing keeps the target-class gradient
away from zero (:math:`g_y = \varepsilon (1 - 1/C)`), so learning does not stall there, but the
row still sums to :math:`s` instead of zero. :func:`measure_gap_threshold` measures any path.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .floats import check_float_dtype, significand_bits, unit_roundoff

__all__ = [
    "CE_PATHS",
    "absorbed_rows",
    "effective_gap",
    "gap_threshold",
    "measure_gap_threshold",
    "predicted_absorbed",
    "threshold_bounds",
]

ORDERS = ("exact", "sequential")


def _check_classes(num_classes: int) -> int:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes must be an int >= 2, got {num_classes!r}")
    return num_classes


def gap_threshold(dtype: torch.dtype, num_classes: int, order: str = "exact") -> float:
    r"""The gap :math:`\Delta^\star` of one logit over ``C - 1`` equal others at which CE absorbs.

    Args:
        dtype: the dtype the softmax sum is rounded to.
        num_classes: ``C >= 2``.
        order: ``"exact"`` (the sum rounded once: :math:`\log(C-1) + t\log 2`) or
            ``"sequential"`` (terms added one by one to the 1: :math:`t\log 2`).

    Returns:
        :math:`\Delta^\star` in nats; a sample with gap :math:`\Delta \ge \Delta^\star` has a
        zero correct-class gradient under that summation order.

    Example:
        >>> round(gap_threshold(torch.bfloat16, 10), 3), round(gap_threshold(torch.float32, 10), 3)
        (7.742, 18.833)
    """
    check_float_dtype(dtype)
    _check_classes(num_classes)
    base = significand_bits(dtype) * math.log(2.0)
    if order == "exact":
        return math.log(num_classes - 1) + base
    if order == "sequential":
        return base
    raise ValueError(f"order must be one of {ORDERS}, got {order!r}")


def threshold_bounds(dtype: torch.dtype, num_classes: int) -> tuple[float, float]:
    r"""``(lo, hi)``: every summation order of :math:`S` absorbs somewhere in ``[lo, hi]``."""
    return gap_threshold(dtype, num_classes, "sequential"), gap_threshold(dtype, num_classes)


def _check_logits_target(logits: Tensor, target: Tensor) -> None:
    if not isinstance(logits, Tensor) or not logits.is_floating_point():
        raise TypeError(f"logits must be a floating tensor, got {getattr(logits, 'dtype', logits)}")
    if logits.dim() != 2:
        raise ValueError(f"logits must have shape (N, C), got {tuple(logits.shape)}")
    _check_classes(logits.shape[1])
    if not isinstance(target, Tensor) or target.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"target must be an integer tensor of class indices, got {target!r:.60}")
    if target.shape != logits.shape[:1]:
        raise ValueError(f"target shape {tuple(target.shape)} != ({logits.shape[0]},)")
    if target.numel() and (target.min() < 0 or target.max() >= logits.shape[1]):
        raise ValueError(
            f"target out of range [0, {logits.shape[1]}): "
            f"min {target.min().item()}, max {target.max().item()}"
        )


def effective_gap(logits: Tensor, target: Tensor) -> Tensor:
    r""":math:`\gamma_i = z_{i,y_i} - \log\sum_{j \ne y_i} e^{z_{ij}}`, computed in float64.

    Args:
        logits: ``(N, C)`` floating, ``C >= 2``.
        target: ``(N,)`` class indices in ``[0, C)``.

    Returns:
        ``(N,)`` float64; the sample's loss is :math:`\log(1 + e^{-\gamma})`.

    Example:
        >>> z = torch.tensor([[3.0, 0.0, 0.0]])
        >>> round(effective_gap(z, torch.tensor([0])).item(), 4)
        2.3069
    """
    _check_logits_target(logits, target)
    z = logits.detach().double()
    zy = z.gather(1, target.long()[:, None]).squeeze(1)
    others = z.scatter(1, target.long()[:, None], -math.inf)
    return zy - torch.logsumexp(others, dim=1)


def predicted_absorbed(
    logits: Tensor, target: Tensor, dtype: torch.dtype | None = None, order: str = "exact"
) -> Tensor:
    r"""Rows whose correct-class gradient the model predicts to be exactly zero.

    ``"exact"``: :math:`\gamma_i \ge -\log u`; ``"sequential"``: every
    :math:`z_{ij} - z_{iy} \le \log u` (each term lost on its own).

    Args:
        logits, target: as in :func:`effective_gap`.
        dtype: the dtype the loss is computed in (default ``logits.dtype``).
        order: ``"exact"`` or ``"sequential"`` (see :func:`gap_threshold`).

    Returns:
        ``(N,)`` bool.
    """
    dtype = logits.dtype if dtype is None else dtype
    log_u = math.log(unit_roundoff(dtype))
    if order == "exact":
        return effective_gap(logits, target) >= -log_u
    if order == "sequential":
        _check_logits_target(logits, target)
        z = logits.detach().double()
        zy = z.gather(1, target.long()[:, None])
        others = z.scatter(1, target.long()[:, None], -math.inf)
        return (others - zy).amax(dim=1) <= log_u
    raise ValueError(f"order must be one of {ORDERS}, got {order!r}")


def absorbed_rows(grad_logits: Tensor, target: Tensor | None = None) -> Tensor:
    r"""Rows of a CE logit gradient in the absorbed regime, read off the gradient itself.

    A row is absorbed when its target entry is exactly zero while another entry is not. With
    ``target=None`` the target is not needed: a healthy CE row has one negative entry (the
    target's, :math:`w(p_y - 1)`) and positive others, while in an absorbed row every entry is
    :math:`\ge 0` and some are positive. So a row counts when it has no negative entry and at
    least one positive one.

    Args:
        grad_logits: ``(N, C)`` gradient of the loss with respect to the logits.
        target: optional ``(N,)`` class indices; rows with a negative target (ignored) are not
            counted.

    Returns:
        ``(N,)`` bool.
    """
    if grad_logits.dim() != 2:
        raise ValueError(f"grad_logits must have shape (N, C), got {tuple(grad_logits.shape)}")
    if target is None:
        return (grad_logits >= 0).all(dim=1) & (grad_logits > 0).any(dim=1)
    valid = target >= 0
    safe = target.clamp_min(0).long()[:, None]
    gy = grad_logits.gather(1, safe).squeeze(1)
    others = grad_logits.scatter(1, safe, 0.0)
    return valid & (gy == 0) & (others != 0).any(dim=1)


def _ce(z: Tensor, y: Tensor) -> Tensor:
    return F.cross_entropy(z, y)


def _log_softmax_nll(z: Tensor, y: Tensor) -> Tensor:
    return F.nll_loss(F.log_softmax(z, dim=-1), y)


def _softmax_log(z: Tensor, y: Tensor) -> Tensor:
    return F.nll_loss(torch.log(F.softmax(z, dim=-1)), y)


def _float64_loss(z: Tensor, y: Tensor) -> Tensor:
    return F.cross_entropy(z.double(), y)


#: Named ways to compute cross-entropy in torch, for :func:`measure_gap_threshold`.
CE_PATHS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "cross_entropy": _ce,
    "log_softmax_nll": _log_softmax_nll,
    "softmax_log": _softmax_log,
    "float64_loss": _float64_loss,
}


def _grad_row(delta: Tensor, num_classes: int, loss_fn: Callable) -> Tensor:
    z = torch.zeros(1, num_classes, dtype=delta.dtype)
    z[0, 0] = delta
    z.requires_grad_(True)
    loss_fn(z, torch.zeros(1, dtype=torch.long)).backward()
    return z.grad[0]


_INT_VIEW = {
    torch.bfloat16: torch.int16,
    torch.float16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}


def measure_gap_threshold(
    dtype: torch.dtype,
    num_classes: int,
    path: str | Callable[[Tensor, Tensor], Tensor] = "cross_entropy",
    hi: float | None = None,
) -> float:
    r"""Smallest gap :math:`\Delta` representable in ``dtype`` at which torch's CE absorbs.

    Logits ``[Δ, 0, ..., 0]`` in ``dtype``, target 0; bisection over the bit patterns of
    positive numbers (ordered like the numbers) for the first :math:`\Delta` whose target
    gradient is exactly zero while another entry is nonzero. Assumes absorption is monotone in
    :math:`\Delta` (true for every path measured here).

    Args:
        dtype: logits dtype.
        num_classes: ``C >= 2``.
        path: a key of :data:`CE_PATHS` or a callable ``(logits, target) -> loss``.
        hi: an upper end that absorbs (checked); default :math:`\Delta^\star_{hi} + 2`, below
            the underflow of the other classes' gradients.

    Returns:
        :math:`\Delta` as a float (exactly the dtype value).
    """
    check_float_dtype(dtype)
    _check_classes(num_classes)
    if isinstance(path, str):
        if path not in CE_PATHS:
            raise ValueError(f"path must be one of {sorted(CE_PATHS)} or a callable, got {path!r}")
        path = CE_PATHS[path]

    iv = _INT_VIEW[dtype]

    def absorbed(bits: int) -> bool:
        delta = torch.tensor([bits], dtype=iv).view(dtype)[0]
        g = _grad_row(delta, num_classes, path)
        return bool(g[0] == 0) and bool((g[1:] != 0).any())

    def to_bits(x: float) -> int:
        return int(torch.tensor([x], dtype=dtype).view(iv)[0])

    if hi is None:  # the dtype's own threshold, else float64's (a path that upcasts)
        his = [gap_threshold(t, num_classes) + 2.0 for t in (dtype, torch.float64)]
        hi = next((h for h in his if absorbed(to_bits(h))), his[0])

    lo_b, hi_b = to_bits(0.5), to_bits(hi)
    if not absorbed(hi_b):
        raise ValueError(f"no absorption up to gap {hi} for {dtype}, C={num_classes}")
    if absorbed(lo_b):
        raise ValueError("absorbs already at gap 0.5; not a CE path")
    while hi_b - lo_b > 1:
        mid = (lo_b + hi_b) // 2
        if absorbed(mid):
            hi_b = mid
        else:
            lo_b = mid
    return float(torch.tensor([hi_b], dtype=iv).view(dtype)[0])
