r"""How workers average their (compressed) pseudo-gradients.

Two communicators with one interface:

- :class:`LocalCommunicator`: M simulated workers in one process (tests, M = 1 runs);
- :class:`TorchDistCommunicator`: one worker per process over ``torch.distributed`` (gloo on
  CPU, NCCL on GPU), started with ``torchrun``.

Both compute :math:`\bar s = \frac1M \sum_{m<M} C^{-1}(p_m)` in worker order. Where the
compressor is all-reducible (identity, Random-k with its shared seed) the values are summed first
and decompressed once, so the exchange is a single all-reduce; otherwise every worker's payload is
encoded into its packed wire format (:mod:`diloco_ef.wire`), all-gathered and decompressed
locally. The ``*_bucket`` methods exchange all tensors of a round in one collective (one per
dtype for dense values): small tensors then cost one message, not one each.

Every communicator has a :class:`~diloco_ef.wire.ByteMeter` (``meter``) that counts the bytes
this rank hands to each collective and the traffic that causes per rank. The simulated
communicator counts what one rank of a real group would hand over (the sizes are the same on
every rank), so simulated and real runs report the same figures.

Start-up agreement (:meth:`Communicator.check_agreement`, :meth:`Communicator.broadcast_`):
every rank contributes a *fingerprint*, a dict of the settings that must be equal everywhere;
a difference raises ``ValueError`` on every rank naming the field and the ranks. Rank 0's
tensors (parameters, buffers, outer state) are then broadcast, as DDP does.

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
from .shared_scale import pack_words, unpack_words
from .wire import ByteMeter, decode, encode, encoded_nbytes

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
    meter: ByteMeter

    @abc.abstractmethod
    def average_dense(self, tensors: Sequence[Tensor]) -> Tensor:
        """The mean over workers of one tensor (``tensors``: one per local worker)."""

    @abc.abstractmethod
    def average_payloads(self, compressor: Compressor, payloads: Sequence[Payload]) -> Tensor:
        """The mean over workers of the decompressed payloads of one tensor."""

    @abc.abstractmethod
    def average_dense_bucket(self, per_worker: Sequence[Sequence[Tensor]]) -> list[Tensor]:
        """Means of several tensors (``per_worker[w][i]``) in one all-reduce per dtype."""

    @abc.abstractmethod
    def average_payloads_bucket(
        self, compressor: Compressor, per_worker: Sequence[Sequence[Payload]]
    ) -> list[Tensor]:
        """Means of several compressed tensors in one collective."""

    @abc.abstractmethod
    def max_bucket(self, per_worker: Sequence[Tensor]) -> Tensor:
        """Elementwise maximum over workers of one vector (``per_worker``: one per local
        worker), in one all-reduce."""

    @abc.abstractmethod
    def check_agreement(self, fingerprint: dict[str, str]) -> None:
        """Raise ``ValueError`` (on every rank) unless all ranks hold this ``fingerprint``."""

    @abc.abstractmethod
    def broadcast_(self, tensors: Sequence[Tensor]) -> None:
        """Overwrite ``tensors`` in place with rank 0's."""

    @abc.abstractmethod
    def broadcast_object(self, obj: object) -> object:
        """Rank 0's ``obj`` (picklable), on every rank."""

    @abc.abstractmethod
    def gather_flags(self, flags: Sequence[bool]) -> list[bool]:
        """Every worker's flag (``flags``: one per local worker), in worker order."""

    def check_shapes(self, shapes: list[tuple[int, ...]]) -> None:
        """Raise ``ValueError`` unless every worker holds parameters of these shapes."""
        self.check_agreement({"parameter shapes": repr(shapes)})


def _check_count(items: Sequence[object], n: int) -> None:
    if len(items) != n:
        raise ValueError(f"expected one message per local worker ({n}), got {len(items)}")


def _dtype_groups(tensors: Sequence[Tensor]) -> dict[torch.dtype, list[int]]:
    groups: dict[torch.dtype, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault(t.dtype, []).append(i)
    return groups


def _split_like(flat: Tensor, like: Sequence[Tensor]) -> list[Tensor]:
    out, pos = [], 0
    for t in like:
        out.append(flat[pos : pos + t.numel()].reshape(t.shape))
        pos += t.numel()
    return out


def _encode_all(compressor: Compressor, payloads: Sequence[Payload]) -> Tensor:
    return torch.cat([encode(compressor, p) for p in payloads])


def _decode_all(compressor: Compressor, buf: Tensor, templates: Sequence[Payload]) -> list[Payload]:
    sizes = [encoded_nbytes(compressor, t) for t in templates]
    out, pos = [], 0
    for t, n in zip(templates, sizes, strict=True):
        out.append(decode(compressor, buf[pos : pos + n], t))
        pos += n
    return out


def _level_words(compressor: Compressor, payloads: Sequence[Payload], workers: int) -> Tensor:
    """Shifted levels of all tensors packed into int64 words whose sum over workers is exact."""
    s = compressor.levels  # type: ignore[attr-defined]
    levels = torch.cat([p.sent["q"].reshape(-1).to(torch.int64) + s for p in payloads])
    return pack_words(levels, compressor.sum_width(workers))  # type: ignore[attr-defined]


def _from_level_words(
    compressor: Compressor, words: Tensor, templates: Sequence[Payload], workers: int
) -> list[Tensor]:
    s, w = compressor.levels, compressor.sum_width(workers)  # type: ignore[attr-defined]
    n = sum(t.numel for t in templates)
    sums = unpack_words(words, w, n) - workers * s
    out, pos = [], 0
    for t in templates:
        level_sum = sums[pos : pos + t.numel]
        out.append(compressor.decompress_sum(level_sum, t, workers))  # type: ignore[attr-defined]
        pos += t.numel
    return out


def _first_difference(everyone: Sequence[dict[str, str]]) -> str | None:
    ref = everyone[0]
    for r, theirs in enumerate(everyone[1:], start=1):
        for key in sorted(set(ref) | set(theirs)):
            if ref.get(key) != theirs.get(key):
                return (
                    f"settings differ across workers: {key!r} is {ref.get(key)} on rank 0 "
                    f"but {theirs.get(key)} on rank {r}"
                )
    return None


class LocalCommunicator(Communicator):
    """``num_workers`` simulated workers, all in this process.

    :attr:`meter` counts what each rank of a real group of ``num_workers`` ranks would hand to
    the backend (the encoded buffers' lengths).

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
        self.meter = ByteMeter(num_workers)

    @staticmethod
    def _sum(tensors: Sequence[Tensor]) -> Tensor:
        total = tensors[0].clone()
        for t in tensors[1:]:
            total += t
        return total

    def average_dense(self, tensors: Sequence[Tensor]) -> Tensor:
        _check_count(tensors, self.world_size)
        self.meter.record("all_reduce", tensors[0].numel() * tensors[0].element_size())
        return self._sum(tensors).div_(self.world_size)

    def average_payloads(self, compressor: Compressor, payloads: Sequence[Payload]) -> Tensor:
        return self.average_payloads_bucket(compressor, [[p] for p in payloads])[0]

    def average_dense_bucket(self, per_worker: Sequence[Sequence[Tensor]]) -> list[Tensor]:
        _check_count(per_worker, self.world_size)
        first = per_worker[0]
        out: list[Tensor | None] = [None] * len(first)
        for idx in _dtype_groups(first).values():
            flats = [torch.cat([ts[i].reshape(-1) for i in idx]) for ts in per_worker]
            self.meter.record("all_reduce", flats[0].numel() * flats[0].element_size())
            avg = self._sum(flats).div_(self.world_size)
            for i, t in zip(idx, _split_like(avg, [first[i] for i in idx]), strict=True):
                out[i] = t
        return out  # type: ignore[return-value]

    def average_payloads_bucket(
        self, compressor: Compressor, per_worker: Sequence[Sequence[Payload]]
    ) -> list[Tensor]:
        _check_count(per_worker, self.world_size)
        first = per_worker[0]
        if compressor.all_reducible:
            values = self.average_dense_bucket(
                [[p.sent["values"] for p in ps] for ps in per_worker]
            )
            return [
                compressor.decompress(Payload({"values": v}, p.shape, p.dtype, p.derived))
                for v, p in zip(values, first, strict=True)
            ]
        if getattr(compressor, "integer_summable", False):
            words = [_level_words(compressor, ps, self.world_size) for ps in per_worker]
            self.meter.record("all_reduce", words[0].numel() * words[0].element_size())
            return _from_level_words(compressor, self._sum(words), first, self.world_size)
        # The wire format is lossless (tests check every compressor), so the simulation skips
        # the round trip through bytes and only counts the buffer a rank would hand over.
        self.meter.record("all_gather", sum(encoded_nbytes(compressor, p) for p in first))
        totals: list[Tensor] | None = None
        for ps in per_worker:
            ds = [compressor.decompress(q) for q in ps]
            totals = ds if totals is None else [a.add_(b) for a, b in zip(totals, ds, strict=True)]
        return [t.div_(self.world_size) for t in totals]  # type: ignore[union-attr]

    def max_bucket(self, per_worker: Sequence[Tensor]) -> Tensor:
        _check_count(per_worker, self.world_size)
        self.meter.record("all_reduce", per_worker[0].numel() * per_worker[0].element_size())
        return torch.stack(list(per_worker)).amax(dim=0)

    def check_agreement(self, fingerprint: dict[str, str]) -> None:
        return None  # one process, one set of settings

    def broadcast_(self, tensors: Sequence[Tensor]) -> None:
        return None  # this process is rank 0

    def broadcast_object(self, obj: object) -> object:
        return obj

    def gather_flags(self, flags: Sequence[bool]) -> list[bool]:
        _check_count(flags, self.world_size)
        self.meter.record("all_gather", 1)  # what a real group exchanges for it
        return [bool(f) for f in flags]


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
        self.meter = ByteMeter(self.world_size)
        self._src = 0 if group is None else dist.get_global_rank(group, 0)
        # NCCL moves CUDA tensors only; the one-byte flags must live there too.
        nccl = dist.get_backend(group) == "nccl"
        self._device = torch.device("cuda", torch.cuda.current_device()) if nccl else None

    def _fail(self, what: str, err: Exception) -> PeerFailureError:
        return PeerFailureError(
            f"rank {self.rank}/{self.world_size}: collective {what} failed; a peer worker "
            f"probably died or stopped answering within the process group timeout ({err})"
        )

    def _all_reduce(self, t: Tensor, op: dist.ReduceOp = dist.ReduceOp.SUM) -> None:
        self.meter.record("all_reduce", t.numel() * t.element_size())
        try:
            dist.all_reduce(t, op=op, group=self.group)
        except (RuntimeError, dist.DistBackendError) as err:
            raise self._fail("all_reduce", err) from err

    def _all_gather(self, t: Tensor) -> list[Tensor]:
        self.meter.record("all_gather", t.numel() * t.element_size())
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
        return self.average_payloads_bucket(compressor, [payloads])[0]

    def average_dense_bucket(self, per_worker: Sequence[Sequence[Tensor]]) -> list[Tensor]:
        _check_count(per_worker, 1)
        mine = per_worker[0]
        out: list[Tensor | None] = [None] * len(mine)
        for idx in _dtype_groups(mine).values():
            flat = torch.cat([mine[i].reshape(-1) for i in idx])
            self._all_reduce(flat)
            flat.div_(self.world_size)
            for i, t in zip(idx, _split_like(flat, [mine[i] for i in idx]), strict=True):
                out[i] = t
        return out  # type: ignore[return-value]

    def average_payloads_bucket(
        self, compressor: Compressor, per_worker: Sequence[Sequence[Payload]]
    ) -> list[Tensor]:
        _check_count(per_worker, 1)
        mine = per_worker[0]
        if compressor.all_reducible:
            values = self.average_dense_bucket([[p.sent["values"] for p in mine]])
            return [
                compressor.decompress(Payload({"values": v}, p.shape, p.dtype, p.derived))
                for v, p in zip(values, mine, strict=True)
            ]
        if getattr(compressor, "integer_summable", False):
            words = _level_words(compressor, mine, self.world_size)
            self._all_reduce(words)
            return _from_level_words(compressor, words, mine, self.world_size)
        gathered = self._all_gather(_encode_all(compressor, mine))
        totals: list[Tensor] | None = None
        for buf in gathered:  # rank order, as the simulation sums in worker order
            ds = [compressor.decompress(q) for q in _decode_all(compressor, buf, mine)]
            totals = ds if totals is None else [a.add_(b) for a, b in zip(totals, ds, strict=True)]
        return [t.div_(self.world_size) for t in totals]  # type: ignore[union-attr]

    def max_bucket(self, per_worker: Sequence[Tensor]) -> Tensor:
        _check_count(per_worker, 1)
        out = per_worker[0].clone()
        self._all_reduce(out, dist.ReduceOp.MAX)
        return out

    def check_agreement(self, fingerprint: dict[str, str]) -> None:
        everyone: list[object] = [None] * self.world_size
        try:
            dist.all_gather_object(everyone, dict(fingerprint), group=self.group)
        except (RuntimeError, dist.DistBackendError) as err:
            raise self._fail("all_gather_object(settings)", err) from err
        msg = _first_difference(everyone)  # type: ignore[arg-type]
        if msg is not None:  # every rank sees the same lists, so every rank raises
            raise ValueError(msg)

    def broadcast_(self, tensors: Sequence[Tensor]) -> None:
        for idx in _dtype_groups(tensors).values():
            flat = torch.cat([tensors[i].detach().reshape(-1) for i in idx])
            self.meter.record("broadcast", flat.numel() * flat.element_size(), root=self.rank == 0)
            try:
                dist.broadcast(flat, src=self._src, group=self.group)
            except (RuntimeError, dist.DistBackendError) as err:
                raise self._fail("broadcast", err) from err
            with torch.no_grad():
                for i, t in zip(idx, _split_like(flat, [tensors[i] for i in idx]), strict=True):
                    tensors[i].copy_(t)

    def broadcast_object(self, obj: object) -> object:
        box = [obj]
        try:
            dist.broadcast_object_list(box, src=self._src, group=self.group)
        except (RuntimeError, dist.DistBackendError) as err:
            raise self._fail("broadcast_object_list", err) from err
        return box[0]

    def gather_flags(self, flags: Sequence[bool]) -> list[bool]:
        _check_count(flags, 1)
        flag = torch.tensor([bool(flags[0])], dtype=torch.uint8, device=self._device)
        got = self._all_gather(flag)
        return [bool(g.item()) for g in got]
