r"""One mirror step on many parameters at once: the ``foreach`` path of ``SMD``.

A mirror map acts on each vector of the last axis independently, so the step of a whole list of
parameters is the step of their rows. The per-parameter loop pays ~10 small tensor ops (and
their Python dispatch) per tensor, which on a model of many small tensors costs more than the
arithmetic. Two ways round it:

* **Euclidean, unconstrained** (plain SGD): :math:`x \leftarrow x - \eta g` for all tensors in
  one ``torch._foreach_add_`` per (device, dtype). Half precisions are stepped in float32 and
  rounded once, as the per-parameter path does (``_foreach_add_`` on a bf16 tensor would round
  :math:`\eta` itself to bf16, a relative error of up to :math:`2^{-9}` in the step).
* **Any row-wise map** (p-norm, entropy, Euclidean on a ball/box with scalar bounds or the
  simplex): rows of equal length from all tensors are concatenated into one matrix, the map's
  vectorised ``step`` runs once per distinct row length, and the results are copied back with
  ``torch._foreach_copy_``. The arithmetic per row is the map's own, so only the order of
  floating-point reductions can differ from the per-parameter path.

A map whose step is not row-wise with shared constants (a ball with a tensor centre, a user's
own map) is stepped per parameter by the caller (:func:`rowwise`).
"""

from __future__ import annotations

import numbers
from collections import defaultdict

import torch
from torch import Tensor

from shared_core.mirror import Ball, Box, Euclidean, MirrorMap, NegEntropy, PNorm

from .simplex import Simplex

__all__ = ["euclidean_step_", "mirror_step_", "rowwise"]

_HALF = (torch.float16, torch.bfloat16)


def _rows(x: Tensor) -> Tensor:
    """The parameter as a matrix of last-axis vectors (a 0-D parameter is one 1-vector)."""
    return x.reshape(1, 1) if x.ndim == 0 else x.reshape(-1, x.shape[-1])


def rowwise(mirror: MirrorMap) -> bool:
    """Whether ``mirror.step`` treats every last-axis vector alike, so rows may be batched."""
    if type(mirror) in (PNorm, NegEntropy):
        return True
    if type(mirror) is Euclidean:
        dom = mirror.domain
        if dom is None or type(dom) is Simplex:
            return True
        if type(dom) is Ball:
            return isinstance(dom.center, numbers.Real)
        if type(dom) is Box:
            return isinstance(dom.lo, numbers.Real) and isinstance(dom.hi, numbers.Real)
    return False


def _by_dtype(xs: list[Tensor], gs: list[Tensor]) -> dict[tuple, tuple[list, list]]:
    out: dict[tuple, tuple[list, list]] = defaultdict(lambda: ([], []))
    for x, g in zip(xs, gs, strict=True):
        bucket = out[(x.device, x.dtype)]
        bucket[0].append(x)
        bucket[1].append(g)
    return out


def euclidean_step_(xs: list[Tensor], gs: list[Tensor], eta: float) -> None:
    r""":math:`x \leftarrow x - \eta g` for every pair, in place, one foreach op per dtype."""
    for (_, dtype), (xb, gb) in _by_dtype(xs, gs).items():
        if dtype in _HALF:
            x32 = [x.float() for x in xb]
            torch._foreach_add_(x32, [g.float() for g in gb], alpha=-eta)
            torch._foreach_copy_(xb, x32)
        else:
            torch._foreach_add_(xb, gb, alpha=-eta)


def mirror_step_(mirror: MirrorMap, xs: list[Tensor], gs: list[Tensor], eta: float) -> None:
    """``x <- mirror.step(x, g, eta)`` for every pair, in place, one map call per row length.

    Args:
        mirror: a map for which :func:`rowwise` holds.
        xs: parameters (any shapes; the map acts on their last axis).
        gs: their gradients, same shapes.
        eta: the step size, > 0.
    """
    for xb, gb in _by_dtype(xs, gs).values():
        by_len: dict[int, list[int]] = defaultdict(list)
        for i, x in enumerate(xb):
            by_len[1 if x.ndim == 0 else x.shape[-1]].append(i)
        targets, values = [], []
        for idx in by_len.values():
            rows = [_rows(xb[i]) for i in idx]
            new = mirror.step(torch.cat(rows), torch.cat([_rows(gb[i]) for i in idx]), eta)
            sizes = [r.shape[0] for r in rows]
            for i, part in zip(idx, torch.split(new, sizes), strict=True):
                targets.append(xb[i])
                values.append(part.reshape(xb[i].shape))
        torch._foreach_copy_(targets, values)
