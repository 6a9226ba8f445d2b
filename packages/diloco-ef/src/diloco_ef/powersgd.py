r"""PowerSGD-style low-rank compression with a shared Q: two all-reduces per round.

:class:`~diloco_ef.compressors.LowRank` lets every worker run its own power iteration, so the
workers' factors span different subspaces and must be all-gathered: each rank then moves
:math:`(M-1)` times its message, which grows with the number of workers :math:`M`.
PowerSGD (Vogels et al., 2019) makes the factors summable by sharing :math:`Q`. Worker
:math:`m` holds :math:`M_m = e_m + \Delta_m` (viewed as an :math:`m\times n` matrix) and every
worker holds the same :math:`Q\in\mathbb{R}^{n\times r}`:

1. :math:`P_m = M_m Q`; all-reduce: :math:`\bar P = \frac1M\sum_m P_m = \bar M Q`;
   :math:`\hat P = \mathrm{orth}(\bar P)` (the same on every rank: it is computed from the same
   all-reduced tensor);
2. :math:`Q_m = M_m^\top \hat P`; all-reduce: :math:`\bar Q = \frac1M\sum_m Q_m = \bar M^\top
   \hat P`.

The average is :math:`\hat P\bar Q^\top = \hat P\hat P^\top \bar M`: the projection of the
workers' mean onto :math:`\mathrm{range}(\bar M Q)`, one step of subspace iteration *on the
mean*. The next round starts from :math:`\bar Q` (the warm start; the same on every rank), so
consecutive rounds on a slowly changing mean converge to its top-:math:`r` singular subspace
at the rate :math:`(\sigma_{r+1}/\sigma_r)^2` per round. Error feedback is per worker on its
local share :math:`s_m = \hat P Q_m^\top = \hat P\hat P^\top M_m`: then
:math:`\frac1M\sum_m s_m = \hat P\bar Q^\top` is exactly what was averaged, and
:math:`s_m + e_m^{new} = e_m + \Delta_m` as for every compressor.

Traffic per round and worker: :math:`r(m+n)` values per compressed matrix in two all-reduces
(ring: :math:`2\frac{M-1}{M}` times that per rank, like DDP's, so the saving does not shrink
with :math:`M`). Tensors with fewer than two dimensions, and matrices with
:math:`r(m+n)\ge mn`, travel dense in the first all-reduce. The first :math:`Q` is Gaussian
from a generator shared by all workers (:attr:`shared_randomness`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from .compressors import Compressor, Payload, _check_float, _orthonormal_columns, _value_bits
from .error_feedback import ErrorFeedback, Sent

__all__ = ["PowerSGD", "powersgd_exchange"]


class PowerSGD(Compressor):
    r"""Rank-r PowerSGD with a shared, warm-started :math:`Q` (see the module docstring).

    In a :class:`~diloco_ef.algorithms.DiLoCo` run the engine exchanges it by
    :func:`powersgd_exchange` (two all-reduces). Alone, ``compress(x, generator, state)`` is
    that exchange with one worker: one power step :math:`P = \mathrm{orth}(xQ)`,
    :math:`Q \leftarrow x^\top P`, :math:`C(x) = PQ^\top`.

    Args:
        rank: r >= 1.

    Example:
        >>> c = PowerSGD(rank=1)
        >>> x = torch.outer(torch.tensor([1.0, 2.0, 2.0]), torch.tensor([3.0, 0.0, 4.0, 0.0]))
        >>> p = c.compress(x, torch.Generator().manual_seed(0))
        >>> torch.allclose(c.decompress(p), x), c.bits_sent(p)  # rank one: exact; (3+4) x 32
        (True, 224)
    """

    stateful = True
    #: every worker must draw the same first Q
    shared_randomness = True
    #: the engine exchanges it with :func:`powersgd_exchange` (two all-reduces)
    shared_factors = True

    def __init__(self, rank: int):
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"rank must be an integer >= 1, got {rank!r}")
        self.rank = rank

    def factor_rank(self, shape: Sequence[int]) -> int:
        """The rank used for a tensor of this ``shape``; 0: sent dense (a vector, or a matrix
        whose factors would cost at least as much as itself)."""
        if len(shape) < 2:
            return 0
        m = int(shape[0])
        n = 1
        for s in shape[1:]:
            n *= int(s)
        r = min(self.rank, m, n)
        return 0 if r * (m + n) >= m * n else r

    def start(self, n_cols: int, r: int, dtype: torch.dtype, generator) -> Tensor:
        """The first :math:`Q` (Gaussian, ``n_cols x r``), drawn on the CPU from ``generator``."""
        return torch.randn(n_cols, r, generator=generator, dtype=dtype, device="cpu")

    def compress(
        self,
        x: Tensor,
        generator: torch.Generator | None = None,
        state: dict[str, Tensor] | None = None,
    ) -> Payload:
        _check_float(x)
        r = self.factor_rank(x.shape)
        if r == 0:
            return Payload({"values": x.detach().clone()}, x.shape, x.dtype)
        _check_factor_dtype(x)
        mat = x.detach().reshape(x.shape[0], -1)
        q = _warm_start(self, state, mat.shape[1], r, mat, generator)
        p = _orthonormal_columns(mat @ q)
        q = mat.T @ p
        if state is not None:
            state["q"] = q.clone()
        return Payload({"p": p, "q": q}, x.shape, x.dtype)

    def decompress(self, payload: Payload) -> Tensor:
        if "values" in payload.sent:
            return payload.sent["values"].reshape(payload.shape).clone()
        return (payload.sent["p"] @ payload.sent["q"].T).reshape(payload.shape)

    def bits_sent(self, payload: Payload) -> int:
        return sum(t.numel() * _value_bits(t.dtype) for t in payload.sent.values())


def _check_factor_dtype(x: Tensor) -> None:
    # QR runs in the tensor's dtype, and torch.linalg.qr takes float32 and float64 only.
    if x.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"PowerSGD compresses float32 or float64 matrices, got {x.dtype}")


def _warm_start(
    c: PowerSGD, state: dict[str, Tensor] | None, n_cols: int, r: int, like: Tensor, generator
) -> Tensor:
    q = None if state is None else state.get("q")
    if q is None or tuple(q.shape) != (n_cols, r):
        q = c.start(n_cols, r, like.dtype, generator)
    return q.to(device=like.device, dtype=like.dtype)


def powersgd_exchange(
    compressor: PowerSGD,
    comm,
    efs: Sequence[ErrorFeedback],
    deltas: Sequence[Sequence[Tensor]],
    generator: Callable[[int], torch.Generator],
) -> tuple[list[Tensor], list[list[Sent]]]:
    """One round of PowerSGD with error feedback for this process's workers.

    Args:
        compressor: the :class:`PowerSGD` settings.
        comm: a :class:`~diloco_ef.comm.Communicator`; two ``average_dense_bucket`` calls.
        efs: one :class:`~diloco_ef.error_feedback.ErrorFeedback` per local worker (error
            buffers, and the shared warm-start ``Q`` under ``states[i]["q"]``; every worker
            holds the same copy).
        deltas: ``deltas[w][i]``, local worker ``w``'s pseudo-gradient of tensor ``i``.
        generator: ``i -> generator`` for the first ``Q`` of tensor ``i`` (the same on all
            workers).

    Returns:
        The averages :math:`\\hat P\\bar Q^\\top` (dense tensors: their mean), and per local
        worker its :class:`~diloco_ef.error_feedback.Sent` records (its share
        :math:`\\hat P Q_m^\\top`, bits of the factors it handed over, measured alpha).
    """
    vs = [[ef.pending(i, d) for i, d in enumerate(ds)] for ef, ds in zip(efs, deltas, strict=True)]
    first = vs[0]
    for v in first:
        _check_float(v)
    ranks = [compressor.factor_rank(v.shape) for v in first]
    mats = [
        [v.reshape(v.shape[0], -1) if r else v for v, r in zip(vw, ranks, strict=True)] for vw in vs
    ]
    qs: dict[int, Tensor] = {}
    for i, r in enumerate(ranks):
        if r:
            _check_factor_dtype(first[i])
            state = efs[0].states.get(i)
            qs[i] = _warm_start(compressor, state, mats[0][i].shape[1], r, mats[0][i], generator(i))
    # Phase 1: P_m = M_m Q, and the dense tensors, in one all-reduce per dtype.
    avg1 = comm.average_dense_bucket(
        [[mw[i] @ qs[i] if r else mw[i] for i, r in enumerate(ranks)] for mw in mats]
    )
    low = sorted(qs)
    p_hat = {i: _orthonormal_columns(avg1[i]) for i in low}
    # Phase 2: Q_m = M_m^T P_hat.
    local_q = [[mw[i].T @ p_hat[i] for i in low] for mw in mats]
    avg2 = dict(zip(low, comm.average_dense_bucket(local_q), strict=True)) if low else {}
    averaged = [
        (p_hat[i] @ avg2[i].T).reshape(v.shape) if r else avg1[i]
        for i, (v, r) in enumerate(zip(first, ranks, strict=True))
    ]
    pos = {i: j for j, i in enumerate(low)}
    sents = []
    for w, (ef, vw) in enumerate(zip(efs, vs, strict=True)):
        mine = []
        for i, v in enumerate(vw):
            if ranks[i]:
                payload = Payload({"p": p_hat[i], "q": local_q[w][pos[i]]}, v.shape, v.dtype)
                ef.states.setdefault(i, {})["q"] = avg2[i].clone()
            else:
                payload = Payload({"values": v}, v.shape, v.dtype)
            mine.append(ef.commit(i, v, compressor.decompress(payload), payload))
        sents.append(mine)
    return averaged, sents
