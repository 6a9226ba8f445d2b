r"""traker-compatibility mode: traker 0.3.2's float32 computation, in its order (not the default).

This package computes the kernel solve and the scores in float64 (:mod:`trak_theory.scores`).
traker 0.3.2 with ``use_half_precision=False`` on the CPU does everything in float32, and at a
badly conditioned projected Gram matrix (condition number ~4e5 for the 4,810-parameter digits
MLP at k = 512, n = 1,000) its float32 round-off alone moves the scores by ~1e-3 of their
largest value. Comparing traker with a float64 evaluation of the same formula therefore mixes
two things: the formula and traker's round-off. This module evaluates the same formula the way
traker does, so that a comparison with traker is like with like; the float64 path stays the
accurate one and the default.

The steps, each in float32 and in this order (what traker 0.3.2 does with its
``BasicProjector``, ``BasicScoreComputer`` and the image-classification margin):

1. per-example gradients of the margin, one batch of ``batch_size`` examples at a time;
2. projection by a (p, k) matrix in column blocks of ``min(k, 100)`` columns, each block a
   contiguous (p, b) float32 matrix multiplied from the right, then an in-place *division* by
   :math:`\sqrt p` rounded to float32 (not a multiplication by :math:`1/\sqrt p`: the two round
   differently);
3. the Gram matrix :math:`\Phi^\top\Phi`, accumulated over row blocks of 20,000 into a float32
   zero matrix, plus :math:`\lambda I`;
4. its inverse by ``torch.linalg.inv`` (LU) in float32, divided in place by the mean absolute
   entry of the inverse;
5. the "features" :math:`\Phi A^{-1}/c` (row blocks of 20,000), and the kernel scores
   :math:`(\Phi A^{-1}/c)\,\Phi_t^\top` accumulated over models into a float32 (n, m) zero
   matrix in model order;
6. the reweighting :math:`q = 1 - p_y` accumulated over models the same way, and the result
   :math:`(\Sigma/J)\odot(\bar q_\Sigma/J)`.

Float32 arithmetic on the same inputs in the same order gives the same bits, so with the same
sketch matrix (:func:`trak_theory.experiments._traker.traker_matrix`) this reproduces traker's
scores to the last bit on the same machine and BLAS (tested), and any disagreement with traker
left is a difference of computation, not of round-off. Scores are returned (targets, train) in
float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .gradients import out_to_loss, per_example_grads

__all__ = ["traker_f32_features", "traker_f32_project", "traker_f32_scores"]

PROJ_BLOCK = 100  # traker's BasicProjector column block
ROW_BLOCK = 20_000  # traker's BasicScoreComputer row block (CUDA_MAX_DIM_SIZE)


def traker_f32_project(g: Tensor, matrix: Tensor, block: int = PROJ_BLOCK) -> Tensor:
    r"""(n, p) gradients times the (p, k) matrix in float32 column blocks, divided by
    :math:`\sqrt p` (float32), as traker's BasicProjector and ``featurize`` do.

    Example:
        >>> g, m = torch.randn(3, 16), torch.randn(16, 5)
        >>> torch.allclose(traker_f32_project(g, m, block=2), g @ m / 4, atol=1e-5)
        True
    """
    if g.dim() != 2 or matrix.dim() != 2 or g.shape[1] != matrix.shape[0]:
        raise ValueError(
            f"need (n, p) gradients and a (p, k) matrix, got {tuple(g.shape)} and "
            f"{tuple(matrix.shape)}"
        )
    p, k = matrix.shape
    g = g.to(torch.float32)
    mat = matrix.to(torch.float32)
    b = min(k, block)
    out = torch.zeros(g.shape[0], k, dtype=torch.float32)
    for st in range(0, k, b):
        ed = min(st + b, k)
        cols = torch.zeros(p, b, dtype=torch.float32)  # a contiguous (p, b) block, as traker's
        cols[:, : ed - st] = mat[:, st:ed]
        out[:, st:ed] = g @ cols[:, : ed - st]
    out /= torch.sqrt(torch.tensor(p, dtype=torch.float32))
    return out


def traker_f32_features(
    model: nn.Module, x: Tensor, y: Tensor, matrix: Tensor, batch_size: int = 100
) -> tuple[Tensor, Tensor]:
    """(projected margin gradients (n, k), q = 1 - p_y (n,)), float32, featurised in batches of
    ``batch_size`` as traker's ``featurize`` / ``score`` calls were."""
    if x.shape[0] == 0:
        raise ValueError("cannot featurise an empty dataset")
    phis, qs = [], []
    for s in range(0, x.shape[0], batch_size):
        xb, yb = x[s : s + batch_size], y[s : s + batch_size]
        g = per_example_grads(model, xb, yb, check=s == 0)
        phis.append(traker_f32_project(g, matrix))
        qs.append(out_to_loss(model, xb, yb).to(torch.float32))
    return torch.cat(phis), torch.cat(qs)


def traker_f32_scores(
    phis_train: Sequence[Tensor],
    phis_target: Sequence[Tensor],
    qs: Sequence[Tensor],
    ridge: float = 0.0,
    row_block: int = ROW_BLOCK,
) -> Tensor:
    r"""traker 0.3.2's ensemble scores computed in float32 in traker's order, (m, n).

    The formula is :func:`trak_theory.scores.traker_scores`'s,
    :math:`\tau = \big(\tfrac1J\sum_j \phi_{t,j}^\top A_j^{-1}\Phi_j^\top / c_j\big)\,\bar q`
    with :math:`A_j = \Phi_j^\top\Phi_j + \lambda I` and :math:`c_j` the mean absolute entry
    of :math:`A_j^{-1}`; only the arithmetic differs (float32, traker's blocking and order).
    """
    if not phis_train:
        raise ValueError("no models")
    if not len(phis_train) == len(phis_target) == len(qs):
        raise ValueError("need one train features, target features and q per model")
    n, k = phis_train[0].shape
    m = phis_target[0].shape[0]
    acc = torch.zeros(n, m, dtype=torch.float32)
    qsum = torch.zeros(n, 1, dtype=torch.float32)
    for pt, pg, q in zip(phis_train, phis_target, qs, strict=True):
        pt, pg = pt.to(torch.float32), pg.to(torch.float32)
        if pt.shape != (n, k) or pg.shape != (m, k) or q.shape != (n,):
            raise ValueError(
                f"model shapes differ: train {tuple(pt.shape)}, target {tuple(pg.shape)}, "
                f"q {tuple(q.shape)}; expected ({n}, {k}), ({m}, {k}), ({n},)"
            )
        xtx = torch.zeros(k, k, dtype=torch.float32)
        for s in range(0, n, row_block):
            blk = pt[s : s + row_block]
            xtx += blk.T @ blk
        a = xtx + ridge * torch.eye(k, dtype=torch.float32)
        inv = torch.linalg.inv(a)
        inv /= inv.abs().mean()
        feats = torch.empty(n, k, dtype=torch.float32)
        for s in range(0, n, row_block):
            feats[s : s + row_block] = pt[s : s + row_block] @ inv
        acc += feats @ pg.T
        qsum += q.to(torch.float32)[:, None]
    j = float(len(phis_train))
    return ((acc / j) * (qsum / j)).T
