r"""Zero-sum-preserving cross-entropy: torch's loss, torch's gradient, one entry recomputed.

The fix. In exact arithmetic the logit gradient of a sample is :math:`g = w(p - e_y)`, with
:math:`\sum_c g_c = 0`. Torch computes the target entry as :math:`g_y = \mathrm{fl}(w p_y) - w`:
a difference of two nearly equal numbers when :math:`p_y \to 1`, whose absolute error is the
rounding error of :math:`p_y` (about :math:`u\,w`) and which becomes exactly 0 once
:math:`p_y` rounds to 1 (:mod:`nfi.thresholds`). The other entries
:math:`g_j = w\,p_j` are small products with a *relative* error of a few :math:`u`. So when
:math:`p_y > 1/2`, the accurate way to get :math:`g_y` is from the others:

.. math:: g_y := -\sum_{j \ne y} g_j ,

which is what :func:`stable_cross_entropy` does (the sum is taken as torch's row sum minus the
target entry, carried in float32 for bf16/fp16 logits, and rounded once to the logits' dtype,
so a row sums to zero up to the rounding of that sum, a few ulp of the target entry, instead of
to :math:`w s` in the absorbed regime). The cost over torch's backward is one extra read of the
gradient and a write of one entry per row.

When :math:`p_y \le 1/2` the subtraction :math:`w p_y - w` is benign (its result is at least
:math:`w/2` in size, so the rounding error of :math:`w p_y` is at most :math:`u` relative to
it) and torch's value is kept bit for bit. The loss value is torch's own (``log_softmax`` then
``nll_loss``), bit for bit, and so are all non-target entries of the gradient.

Modes:

* ``"confident"`` (default): recompute :math:`g_y` in every row with :math:`p_y > 1/2`;
* ``"absorbed"``: recompute it only in rows torch has absorbed (:math:`g_y = 0` exactly while
  another entry is not); every other row is torch's gradient bit for bit. Rows just below the
  threshold, where torch's :math:`g_y` is nonzero but still wrong by :math:`O(u w)`, are not
  corrected in this mode.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["MODES", "StableCrossEntropy", "StableCrossEntropyFunction", "stable_cross_entropy"]

MODES = ("confident", "absorbed")
BACKENDS = ("auto", "torch", "triton")
REDUCTIONS = ("mean", "sum", "none")
_LOG_HALF = -math.log(2.0)
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _flatten(logits: Tensor, target: Tensor) -> tuple[Tensor, Tensor, tuple[int, ...] | None]:
    """(N, C) and (N,) views in torch's class-dim-1 convention; the shape for ``"none"``."""
    if not isinstance(logits, Tensor) or not logits.is_floating_point():
        raise TypeError(
            f"logits must be a floating tensor, got {getattr(logits, 'dtype', type(logits))}"
        )
    if not isinstance(target, Tensor) or target.is_floating_point() or target.is_complex():
        raise TypeError(
            f"target must be an integer tensor of class indices, got "
            f"{getattr(target, 'dtype', type(target))} (probabilities as targets are not supported)"
        )
    if logits.dim() < 2:
        raise ValueError(
            f"logits must have shape (N, C) or (N, C, d1, ...), got {tuple(logits.shape)}"
        )
    if logits.shape[0] == 0:
        raise ValueError("empty batch: logits have N = 0 rows")
    C = logits.shape[1]
    if C < 2:
        raise ValueError(f"need at least 2 classes, got C = {C}")
    expected = (logits.shape[0], *logits.shape[2:])
    if tuple(target.shape) != expected:
        raise ValueError(
            f"target shape {tuple(target.shape)} != {expected} for logits {tuple(logits.shape)}"
        )
    if logits.dim() == 2:
        return logits, target.long(), None
    z = logits.movedim(1, -1).reshape(-1, C)
    return z, target.reshape(-1).long(), expected


def _check_target_range(target: Tensor, C: int, ignore_index: int) -> None:
    # one host sync on the common (valid) path: on a GPU each sync stalls the launch queue,
    # and torch's own CE (a device-side assert) has none to set the pace against
    bad = (target != ignore_index) & ((target < 0) | (target >= C))
    if bool(bad.any()):
        t = target[target != ignore_index]
        lo, hi = int(t.min()), int(t.max())
        raise ValueError(
            f"target out of range [0, {C}) (ignore_index={ignore_index}): min {lo}, max {hi}"
        )


class StableCrossEntropyFunction(torch.autograd.Function):
    """Autograd function behind :func:`stable_cross_entropy` (2-D logits, long targets)."""

    @staticmethod
    def forward(ctx, logits, target, ignore_index, reduction, mode, backend="torch"):
        logp = torch.log_softmax(logits, dim=1)
        loss = F.nll_loss(logp, target, ignore_index=ignore_index, reduction=reduction)
        ctx.save_for_backward(logp, target)
        ctx.ignore_index, ctx.reduction, ctx.mode = ignore_index, reduction, mode
        ctx.backend = backend
        ctx.mark_non_differentiable(target)
        return loss

    @staticmethod
    def backward(ctx, grad_out):
        logp, target = ctx.saved_tensors
        grad = stable_ce_grad(
            logp, target, grad_out, ctx.ignore_index, ctx.reduction, ctx.mode, ctx.backend
        )
        return grad, None, None, None, None, None


def stable_ce_grad(
    logp: Tensor,
    target: Tensor,
    grad_out: Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
    mode: str = "confident",
    backend: str = "torch",
) -> Tensor:
    r"""The logit gradient of CE from saved log-probabilities, target entry recomputed.

    Args:
        logp: ``(N, C)`` log-softmax of the logits (torch's own).
        target: ``(N,)`` long class indices; ``ignore_index`` rows get a zero gradient.
        grad_out: upstream gradient of the loss (a scalar, or ``(N,)`` for ``"none"``).
        ignore_index, reduction: as in ``torch.nn.functional.cross_entropy``.
        mode: ``"confident"`` or ``"absorbed"`` (module docstring).
        backend: ``"torch"`` (torch's gradient, target entries recomputed) or ``"triton"``
            (the fused kernel of :mod:`nfi.kernels`, mode ``"confident"`` only; non-target
            entries then agree with torch's to a few ulp instead of bit for bit).

    Returns:
        ``(N, C)`` gradient in ``logp``'s dtype.
    """
    N, _ = logp.shape
    valid = target != ignore_index
    safe_t = torch.where(valid, target, torch.zeros_like(target))[:, None]
    # the per-row weight w exactly as nll_loss's backward forms it
    if reduction == "none":
        w = grad_out.to(logp.dtype)
    elif reduction == "sum":
        w = grad_out.to(logp.dtype).expand(N)
    else:
        total = valid.sum().to(logp.dtype)
        w = (grad_out.to(logp.dtype) / total).expand(N)
    w = torch.where(valid, w, torch.zeros_like(w))
    if backend == "triton":
        from .kernels import launch_ce_grad

        # targets were range-checked by the caller; the launcher's own check would add syncs
        return launch_ce_grad(logp, safe_t.squeeze(1), w.contiguous())
    # index_put_, not scatter_: bf16 scatter_ on CPU rewrites the whole tensor (3x slower)
    rows_idx = torch.arange(N, device=logp.device)
    grad_logp = torch.zeros_like(logp).index_put_((rows_idx, safe_t[:, 0]), -w)
    grad = torch._log_softmax_backward_data(grad_logp, logp, 1, logp.dtype)

    gy = grad.gather(1, safe_t).squeeze(1)
    # torch's own row sum (cascade-summed, accumulated in float32 for bf16/fp16), carried on
    # in float32 for bf16/fp16 and in the dtype otherwise: a float64 sum of float32 rows would
    # be about 6x slower on CPU for an error that is already a few ulp
    half = grad.dtype in (torch.bfloat16, torch.float16)
    acc = torch.float32 if half else grad.dtype

    def row_sum(g: Tensor) -> Tensor:
        return g.sum(dim=1).to(acc)

    if mode == "confident":
        rows = valid & (logp.gather(1, safe_t).squeeze(1) > _LOG_HALF)
    else:
        rowsum = row_sum(grad)
        rows = valid & (gy == 0) & (rowsum != 0)
    if rows.any():
        # sum of the others = (row sum) - g_y in the accumulator: one extra read of the
        # gradient, error ~ C u_acc |g_y|, then rounded once to the dtype
        if mode == "confident":
            rowsum = row_sum(grad)
        comp = rowsum - gy.to(acc)
        new_gy = torch.where(rows, (-comp).to(grad.dtype), gy)
        grad.index_put_((rows_idx, safe_t[:, 0]), new_gy)
    return grad


def _has_triton() -> bool:
    from shared_core.kernels import HAS_TRITON

    return HAS_TRITON


def stable_cross_entropy(
    logits: Tensor,
    target: Tensor,
    *,
    ignore_index: int = -100,
    reduction: str = "mean",
    mode: str = "confident",
    backend: str = "auto",
) -> Tensor:
    r"""Cross-entropy whose per-sample logit gradient sums to zero in the confident regime.

    The loss equals ``torch.nn.functional.cross_entropy(logits, target, ...)`` bit for bit;
    the gradient equals torch's except the target entry of rows with :math:`p_y > 1/2`
    (``mode="confident"``) or of absorbed rows (``mode="absorbed"``), which is set to minus
    the sum of the row's other entries.

    Args:
        logits: ``(N, C)`` or ``(N, C, d1, ...)`` floating (classes on dim 1, like torch).
        target: class indices of shape ``(N,)`` or ``(N, d1, ...)``, integer.
        ignore_index: target value whose rows contribute nothing (and do not count in the mean).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        mode: ``"confident"`` or ``"absorbed"``.
        backend: ``"auto"`` (the Triton kernel for float32/bf16/fp16 CUDA tensors in mode
            ``"confident"`` when Triton is installed, else torch), ``"torch"``, or
            ``"triton"`` (CUDA, or CPU under ``TRITON_INTERPRET=1``).

    Returns:
        The loss (a scalar, or the target's shape for ``"none"``).

    Example:
        >>> z = torch.tensor([[20.0, 0.0, 0.0]], requires_grad=True)
        >>> stable_cross_entropy(z, torch.tensor([0])).backward()
        >>> bool(z.grad.sum() == 0), bool(z.grad[0, 0] < 0)
        (True, True)
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"ignore_index must be an int, got {ignore_index!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "triton" and mode != "confident":
        raise ValueError("the Triton backend implements mode='confident' only")
    z, t, shape = _flatten(logits, target)
    _check_target_range(t, z.shape[1], ignore_index)
    if backend == "auto":
        # the kernel takes float32/bf16/fp16; float64 logits keep the torch path
        fused = z.is_cuda and mode == "confident" and z.dtype in _TRITON_DTYPES
        backend = "triton" if (fused and _has_triton()) else "torch"
    loss = StableCrossEntropyFunction.apply(z, t, ignore_index, reduction, mode, backend)
    if shape is not None and reduction == "none":
        loss = loss.reshape(shape)
    return loss


class StableCrossEntropy(nn.Module):
    """Drop-in for ``torch.nn.CrossEntropyLoss`` (no class weights, no label smoothing).

    Args:
        ignore_index: as in torch (default -100).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        mode: ``"confident"`` (default) or ``"absorbed"``; see :mod:`nfi.loss`.
        backend: ``"auto"`` (default), ``"torch"`` or ``"triton"``; see
            :func:`stable_cross_entropy`.
    """

    def __init__(
        self,
        ignore_index: int = -100,
        reduction: str = "mean",
        mode: str = "confident",
        backend: str = "auto",
    ):
        super().__init__()
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.ignore_index, self.reduction, self.mode = ignore_index, reduction, mode
        self.backend = backend

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return stable_cross_entropy(
            logits,
            target,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            mode=self.mode,
            backend=self.backend,
        )

    def extra_repr(self) -> str:
        return f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, mode={self.mode!r}"
