r"""The wire format of a compressed message, and a byte meter.

A :class:`~diloco_ef.compressors.Payload` holds its integer fields in whatever dtype is
convenient to compute with (4-bit levels in int8, signs in uint8, Top-k indices in int64).
:func:`encode` turns one payload into the single ``uint8`` buffer that is handed to the
collective, :func:`decode` inverts it exactly:

- floating fields (values, scales, norms, low-rank factors) travel as their raw bytes;
- an integer field the compressor declares as ``b`` bits wide
  (:meth:`~diloco_ef.compressors.Compressor.field_bits`) is shifted by its offset into
  :math:`[0, 2^b)` and bit-packed, ``b`` bits per entry, little-endian within each byte;
- Top-k indices are sent as a ``d``-bit bitmap instead when that is smaller
  (:math:`d < k\lceil\log_2 d\rceil`, i.e. keep ratios above :math:`1/\lceil\log_2 d\rceil`);
  the values are then sent in ascending index order, which the bitmap implies.

So a payload of ``bits_sent`` bits occupies :math:`\lceil\cdot/8\rceil` bytes per field: the
accounting and the buffer differ only by the padding of each field to whole bytes (a test
checks this for every compressor). Sizes depend only on the compressor and the tensor's
shape, never on its values, so every rank's buffer has the same length and an all-gather
needs no size exchange.

:class:`ByteMeter` counts what a communicator hands to the backend (``handed``: the bytes of
the tensors passed to each collective by this rank) and the traffic those collectives cause
per rank under the standard algorithms (``sent``/``received``): an all-gather of ``n`` bytes
from each of ``M`` ranks makes every rank send and receive :math:`(M-1)n` (ring), an all-reduce
of ``n`` bytes :math:`2\frac{M-1}{M}n` each way (ring reduce-scatter + all-gather), a broadcast
of ``n`` bytes :math:`n` per receiving rank. ``handed`` is measured; ``sent``/``received`` follow
from it and ``M`` by these formulas (a backend may use another algorithm, e.g. gloo's halving-
doubling all-reduce moves the same :math:`2\frac{M-1}{M}n`; the socket bytes add headers).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover
    from .compressors import Compressor, Payload

__all__ = ["ByteMeter", "decode", "encode", "encoded_nbytes", "pack_bits", "unpack_bits"]


def pack_bits(values: Tensor, bits: int) -> Tensor:
    """Pack non-negative integers ``< 2**bits`` into ``ceil(n * bits / 8)`` bytes.

    Entry ``i`` occupies stream bits ``i*bits .. i*bits+bits-1`` (least significant first);
    stream bit ``j`` is bit ``j % 8`` of byte ``j // 8``.

    Example:
        >>> pack_bits(torch.tensor([1, 2, 3]), 2)  # 01 10 11 -> 0b00111001
        tensor([57], dtype=torch.uint8)
    """
    if not 1 <= bits <= 62:
        raise ValueError(f"bits must lie in [1, 62], got {bits}")
    v = values.reshape(-1).to(torch.int64)
    if v.numel() and (int(v.min()) < 0 or int(v.max()) >= 1 << bits):
        raise ValueError(f"values must lie in [0, 2**{bits}) to be packed in {bits} bits")
    if bits == 8:
        return v.to(torch.uint8)
    shifts = torch.arange(bits, device=v.device, dtype=torch.int64)
    stream = ((v[:, None] >> shifts) & 1).reshape(-1).to(torch.uint8)
    pad = (-stream.numel()) % 8
    if pad:
        stream = torch.cat([stream, stream.new_zeros(pad)])
    weights = (1 << torch.arange(8, device=v.device, dtype=torch.int64)).to(torch.uint8)
    # Each byte is a sum of distinct powers of two, at most 255: no carries, no overflow.
    return (stream.reshape(-1, 8) * weights).sum(dim=1, dtype=torch.int64).to(torch.uint8)


def unpack_bits(buf: Tensor, bits: int, n: int) -> Tensor:
    """Inverse of :func:`pack_bits`: the first ``n`` ``bits``-wide integers of ``buf`` (int64).

    Example:
        >>> unpack_bits(torch.tensor([57], dtype=torch.uint8), 2, 3)
        tensor([1, 2, 3])
    """
    if bits == 8:
        return buf[:n].to(torch.int64)
    b = buf.to(torch.int64)
    stream = ((b[:, None] >> torch.arange(8, device=b.device)) & 1).reshape(-1)[: n * bits]
    weights = 1 << torch.arange(bits, device=b.device, dtype=torch.int64)
    return (stream.reshape(n, bits) * weights).sum(dim=1)


def _packed_len(n: int, bits: int) -> int:
    return (n * bits + 7) // 8


def _bitmap_wins(compressor: Compressor, payload: Payload) -> bool:
    from .compressors import TopK, index_bits

    if not isinstance(compressor, TopK) or "indices" not in payload.sent:
        return False
    d, k = payload.numel, payload.sent["indices"].numel()
    return d < k * index_bits(d)


def _fields(compressor: Compressor, payload: Payload) -> list[tuple[str, Tensor, tuple | None]]:
    """``(name, tensor, (bits, offset) or None)`` in a fixed order; bitmap already applied."""
    sent = dict(payload.sent)
    formats: dict[str, tuple | None] = {}
    if _bitmap_wins(compressor, payload):
        order = torch.argsort(sent["indices"])
        bitmap = torch.zeros(payload.numel, dtype=torch.int64, device=sent["indices"].device)
        bitmap[sent["indices"]] = 1
        sent["values"] = sent["values"][order]
        del sent["indices"]
        sent["bitmap"] = bitmap
        formats["bitmap"] = (1, 0)
    out = []
    for name in sorted(sent):
        t = sent[name]
        fmt = formats.get(name) if name in formats else compressor.field_bits(name, payload)
        if fmt is None and not t.is_floating_point():
            fmt = (torch.iinfo(t.dtype).bits, -torch.iinfo(t.dtype).min)  # unpacked width
        out.append((name, t, fmt))
    return out


def encode(compressor: Compressor, payload: Payload) -> Tensor:
    """The ``uint8`` buffer that carries ``payload`` (see the module docstring)."""
    parts = []
    for _, t, fmt in _fields(compressor, payload):
        if fmt is None:
            parts.append(t.detach().contiguous().reshape(-1).view(torch.uint8))
        else:
            bits, offset = fmt
            parts.append(pack_bits(t.reshape(-1).to(torch.int64) + offset, bits))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.uint8)


def encoded_nbytes(compressor: Compressor, payload: Payload) -> int:
    """Length of :func:`encode`'s buffer, without building it."""
    total = 0
    bitmap = _bitmap_wins(compressor, payload)
    for name, t in payload.sent.items():
        if bitmap and name == "indices":
            total += _packed_len(payload.numel, 1)
            continue
        fmt = compressor.field_bits(name, payload)
        if fmt is None and not t.is_floating_point():
            fmt = (torch.iinfo(t.dtype).bits, 0)
        total += t.numel() * t.element_size() if fmt is None else _packed_len(t.numel(), fmt[0])
    return total


def decode(compressor: Compressor, buf: Tensor, template: Payload) -> Payload:
    """The payload whose :func:`encode` is ``buf``; ``template`` is any payload of the same
    compressor and tensor shape (this rank's own), which fixes the fields' sizes and dtypes."""
    from .compressors import Payload

    sent: dict[str, Tensor] = {}
    pos = 0
    for name, t, fmt in _fields(compressor, template):
        if fmt is None:
            n = t.numel() * t.element_size()
            sent[name] = buf[pos : pos + n].clone().view(t.dtype).reshape(t.shape)
        else:
            bits, offset = fmt
            n = _packed_len(t.numel(), bits)
            vals = unpack_bits(buf[pos : pos + n], bits, t.numel()) - offset
            sent[name] = vals.to(t.dtype).reshape(t.shape)
        pos += n
    if pos != buf.numel():
        raise ValueError(f"buffer of {buf.numel()} bytes, the template needs {pos}")
    if "bitmap" in sent:
        sent["indices"] = torch.nonzero(sent.pop("bitmap")).reshape(-1)
    return Payload(sent, template.shape, template.dtype, dict(template.derived))


@dataclass
class ByteMeter:
    """Bytes one rank hands to collectives, and the traffic they cause for that rank.

    Attributes:
        world_size: M, for the traffic formulas.
        counts: per collective name (``all_gather``, ``all_reduce``, ``broadcast``, ...):
            ``calls``, ``handed``, ``sent``, ``received``.

    Example:
        >>> m = ByteMeter(4)
        >>> m.record("all_gather", 100)
        >>> m.record("all_reduce", 100)
        >>> m.totals()["sent"]  # 3 x 100 + 2 x 3/4 x 100
        450.0
    """

    world_size: int
    counts: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: dict.fromkeys(_KEYS, 0.0))
    )

    def record(self, op: str, handed: int, *, root: bool = False) -> None:
        """Count one collective of ``handed`` bytes from this rank (``root`` for a broadcast)."""
        m = self.world_size
        if op == "all_gather":
            sent = received = (m - 1) * handed
        elif op == "all_reduce":
            sent = received = 2.0 * (m - 1) / m * handed
        elif op == "broadcast":
            sent, received = ((m - 1) * handed, 0) if root else (0, handed)
        else:
            raise ValueError(f"unknown collective {op!r}")
        c = self.counts[op]
        c["calls"] += 1
        c["handed"] += handed
        c["sent"] += sent
        c["received"] += received

    def totals(self) -> dict[str, float]:
        """Sums over all collectives."""
        return {k: float(sum(c[k] for c in self.counts.values())) for k in _KEYS}

    def reset(self) -> None:
        self.counts.clear()


_KEYS = ("calls", "handed", "sent", "received")
