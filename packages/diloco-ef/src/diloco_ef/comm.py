r"""How workers average their (compressed) pseudo-gradients.

Two communicators with one interface:

- :class:`LocalCommunicator`: M simulated workers in one process (tests, M = 1 runs);
- :class:`TorchDistCommunicator`: one worker per process over ``torch.distributed`` (gloo on
  CPU, NCCL on GPU), started with ``torchrun``.

Both compute :math:`\bar s = \frac1M \sum_{m<M} C^{-1}(p_m)` in worker order. Where the
compressor is all-reducible (identity, Random-k with its shared seed) the values are summed first
and decompressed once, so the exchange is a single all-reduce; otherwise every worker's payload is
all-gathered and decompressed locally.

A collective that fails (a peer died, or nobody answered within the process group's timeout)
raises :class:`PeerFailureError` naming the rank and the collective, instead of hanging.
"""

from __future__ import annotations

import abc
import datetime as _dt
import os
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from .compressors import Compressor, Payload

__all__ = [
    "Communicator",
    "LocalCommunicator",
    "PeerFailureError",
    "TorchDistCommunicator",
    "init_distributed",
]


class PeerFailureError(RuntimeError):
    """A collective failed: a peer worker died or timed out."""


class Communicator(abc.ABC):
    """Averages over all :attr:`world_size` workers; this process holds :attr:`worker_ids`."""

    world_size: int
    worker_ids: list[int]

    @abc.abstractmethod
    def average_dense(self, tensors: Sequence[Tensor]) -> Tensor: ...

    @abc.abstractmethod
    def average_payloads(self, compressor: Compressor, payloads: Sequence[Payload]) -> Tensor: ...

    @abc.abstractmethod
    def check_shapes(self, shapes: list[tuple[int, ...]]) -> None:
        """Raise ``ValueError`` unless every worker holds parameters of these shapes."""
        ...


def _check_count(items: Sequence[object], n: int) -> None:
    if len(items) != n:
        raise ValueError(f"expected one message per local worker ({n}), got {len(items)}")


class LocalCommunicator(Communicator):
    """``num_workers`` simulated workers, all in this process.

    Example:
        >>> c = LocalCommunicator(2)
        >>> c.average_dense([torch.tensor([1.0]), torch.tensor([2.0])])
        tensor([1.5000])
    """

    def __init__(self, num_workers: int):
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be an integer >= 1, got {num_workers!r}")
        self.world_size = num_workers
        self.worker_ids = list(range(num_workers))

    def average_dense(self, tensors: Sequence[Tensor]) -> Tensor:
        _check_count(tensors, self.world_size)
        total = tensors[0].clone()
        for t in tensors[1:]:
            total += t
        return total.div_(self.world_size)

    def average_payloads(self, compressor: Compressor, payloads: Sequence[Payload]) -> Tensor:
        _check_count(payloads, self.world_size)
        if compressor.all_reducible:
            values = self.average_dense([p.sent["values"] for p in payloads])
            first = payloads[0]
            return compressor.decompress(
                Payload({"values": values}, first.shape, first.dtype, first.derived)
            )
        total = compressor.decompress(payloads[0])
        for p in payloads[1:]:
            total += compressor.decompress(p)
        return total.div_(self.world_size)

    def check_shapes(self, shapes: list[tuple[int, ...]]) -> None:
        return None


def init_distributed(backend: str | None = None, *, timeout_s: float = 60.0) -> None:
    """Initialise the default process group from torchrun's environment variables.

    Args:
        backend: ``"gloo"`` or ``"nccl"``; default NCCL when CUDA is available, else gloo.
        timeout_s: how long a collective waits for its peers before failing (> 0).

    Raises:
        ValueError: ``timeout_s <= 0`` or the torchrun variables are missing.
    """
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
    missing = [
        v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ
    ]
    if missing:
        raise ValueError(f"init_distributed needs torchrun's environment; missing {missing}")
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, init_method="env://", timeout=_dt.timedelta(seconds=timeout_s))


class TorchDistCommunicator(Communicator):
    """One worker per process over an initialised ``torch.distributed`` process group.

    Args:
        group: the process group (default: the world).
    """

    def __init__(self, group: dist.ProcessGroup | None = None):
        if not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialised; call init_distributed()")
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.worker_ids = [self.rank]

    def _fail(self, what: str, err: Exception) -> PeerFailureError:
        return PeerFailureError(
            f"rank {self.rank}/{self.world_size}: collective {what} failed; a peer worker "
            f"probably died or stopped answering within the process group timeout ({err})"
        )

    def _all_reduce(self, t: Tensor) -> None:
        try:
            dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group)
        except (RuntimeError, dist.DistBackendError) as err:
            raise self._fail("all_reduce", err) from err

    def _all_gather(self, t: Tensor) -> list[Tensor]:
        out = [torch.empty_like(t) for _ in range(self.world_size)]
        try:
            dist.all_gather(out, t.contiguous(), group=self.group)
        except (RuntimeError, dist.DistBackendError) as err:
            raise self._fail("all_gather", err) from err
        return out

    def average_dense(self, tensors: Sequence[Tensor]) -> Tensor:
        _check_count(tensors, 1)
        total = tensors[0].clone()
        self._all_reduce(total)
        return total.div_(self.world_size)

    def average_payloads(self, compressor: Compressor, payloads: Sequence[Payload]) -> Tensor:
        _check_count(payloads, 1)
        mine = payloads[0]
        if compressor.all_reducible:
            values = self.average_dense([mine.sent["values"]])
            return compressor.decompress(
                Payload({"values": values}, mine.shape, mine.dtype, mine.derived)
            )
        gathered = {k: self._all_gather(v) for k, v in mine.sent.items()}
        total = None
        for r in range(self.world_size):
            p = Payload({k: g[r] for k, g in gathered.items()}, mine.shape, mine.dtype)
            d = compressor.decompress(p)
            total = d if total is None else total.add_(d)
        return total.div_(self.world_size)

    def check_shapes(self, shapes: list[tuple[int, ...]]) -> None:
        everyone: list[object] = [None] * self.world_size
        try:
            dist.all_gather_object(everyone, shapes, group=self.group)
        except (RuntimeError, dist.DistBackendError) as err:
            raise self._fail("all_gather_object(shapes)", err) from err
        for r, theirs in enumerate(everyone):
            if theirs != shapes:
                raise ValueError(
                    f"parameter shapes differ across workers: rank {self.rank} has {shapes}, "
                    f"rank {r} has {theirs}"
                )
