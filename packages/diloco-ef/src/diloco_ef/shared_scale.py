r"""Quantisation with a scale shared by all workers, so the exchange is an integer all-reduce.

With per-worker scales (:class:`~diloco_ef.compressors.AbsmaxQuant`) the levels of different
workers mean different values and every worker's message must be all-gathered: each rank
sends :math:`(M-1)\times` its message, which grows with the number of workers :math:`M`.
:class:`SharedScaleQuant` first agrees on one scale per tensor, :math:`\sigma = A/s` with
:math:`A = \max_m \|v_m\|_\infty` (an all-reduce of one number per tensor, MAX) and
:math:`s = 2^{b-1}-1`, then worker :math:`m` sends :math:`q_m = \mathrm{round}(v_m/\sigma) \in
[-s, s]` and the average is :math:`\sigma \sum_m q_m / M`: the levels add up exactly as integers.

The integer sum travels as one all-reduce of packed words: the shifted levels :math:`q_m + s
\in [0, 2s]` sum to at most :math:`2sM`, so a field of :math:`w = \lceil\log_2(2sM+1)\rceil`
bits holds the sum without overflow; :math:`\lfloor 63/w\rfloor` fields share one int64 word,
and adding words adds every field independently (no carry crosses a field boundary, and the
top bit stays clear). A ring all-reduce then moves :math:`2\frac{M-1}{M}` times about
:math:`w` bits per coordinate per rank, against :math:`(M-1)\,b` bits for the all-gather: at
:math:`b = 4` that is :math:`w = 6` at :math:`M = 4` (9.6 vs 12 bits) and :math:`w = 7` at
:math:`M = 8` (12.4 vs 28 bits), and the gap grows with :math:`M`.

The price is accuracy on small workers: a worker whose entries are all below :math:`\sigma/2`
sends zeros, so one call has no contraction bound for it (its :math:`\alpha` can be 0). Error
feedback keeps what was not sent, so its buffer grows until it is sent; the measured
:math:`\alpha` is reported each round as for every compressor. Alone (no shared scale given)
it equals :class:`~diloco_ef.compressors.AbsmaxQuant`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .compressors import Compressor, Payload, _check_float
from .kernels.int8 import int8_quantize

__all__ = ["SharedScaleQuant", "pack_words", "unpack_words"]


def _per_word(width: int) -> int:
    if not 1 <= width <= 63:
        raise ValueError(f"field width must lie in [1, 63], got {width}")
    return 63 // width


def pack_words(values: Tensor, width: int) -> Tensor:
    """Non-negative integers ``< 2**width`` packed ``63 // width`` per int64 word, so that
    adding words adds the fields as long as no field's sum reaches ``2**width``.

    Example:
        >>> w = pack_words(torch.tensor([1, 2, 3]), 21)  # three fields in one word
        >>> unpack_words(w + w, 21, 3)
        tensor([2, 4, 6])
    """
    f = _per_word(width)
    v = values.reshape(-1).to(torch.int64)
    pad = (-v.numel()) % f
    if pad:
        v = torch.cat([v, v.new_zeros(pad)])
    shifts = torch.arange(f, device=v.device, dtype=torch.int64) * width
    return (v.reshape(-1, f) << shifts).sum(dim=1)


def unpack_words(words: Tensor, width: int, n: int) -> Tensor:
    """The first ``n`` fields of :func:`pack_words`'s ``words`` (int64)."""
    f = _per_word(width)
    shifts = torch.arange(f, device=words.device, dtype=torch.int64) * width
    return ((words[:, None] >> shifts) & ((1 << width) - 1)).reshape(-1)[:n]


class SharedScaleQuant(Compressor):
    r"""b-bit absmax quantisation with a scale shared by all workers (integer all-reduce).

    ``compress(x, generator, shared_absmax=A)`` quantises with :math:`\sigma = A/s`
    (:math:`A \ge \|x\|_\infty`, the maximum over workers); without ``shared_absmax`` it uses
    :math:`\|x\|_\infty` and is :class:`~diloco_ef.compressors.AbsmaxQuant`. Message: b bits per
    coordinate and the one absmax number the workers reduce (at the value dtype's width).

    Args:
        bits: 2 <= b <= 8.

    Example:
        >>> c = SharedScaleQuant(bits=3)  # levels -3..3
        >>> c.decompress(c.compress(torch.tensor([1.0, -0.4]), shared_absmax=torch.tensor(3.0)))
        tensor([ 1., -0.])
        >>> c.sum_width(4)  # shifted levels 0..6, four of them sum to at most 24: 5 bits
        5
    """

    #: the engine agrees on ``shared_absmax`` (an all-reduce MAX) before compressing
    needs_shared_scale = True
    #: payload levels add up as integers across workers (see :meth:`decompress_sum`)
    integer_summable = True

    def __init__(self, bits: int):
        if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 8:
            raise ValueError(f"bits must be an integer in [2, 8], got {bits!r}")
        self.bits = bits

    @property
    def levels(self) -> int:
        return 2 ** (self.bits - 1) - 1

    def sum_width(self, workers: int) -> int:
        """Bits that hold the sum of ``workers`` shifted levels (each in ``[0, 2s]``)."""
        return (2 * self.levels * workers).bit_length()

    def compress(
        self,
        x: Tensor,
        generator: torch.Generator | None = None,
        shared_absmax: Tensor | None = None,
    ) -> Payload:
        _check_float(x)
        flat = x.detach().reshape(-1)
        s = self.levels
        own = flat.abs().max() if flat.numel() else flat.new_zeros(())
        a = own if shared_absmax is None else shared_absmax.to(flat.dtype).reshape(())
        if float(a) < float(own):
            raise ValueError(f"shared_absmax {float(a)} is below this tensor's {float(own)}")
        scale = a / s
        if float(scale) == 0.0:
            q = torch.zeros(flat.numel(), dtype=torch.int8, device=flat.device)
        else:
            q = int8_quantize(flat, float(scale)).clamp_(-s, s)
        return Payload({"q": q}, x.shape, x.dtype, derived={"scale": scale.reshape(1).clone()})

    def decompress(self, payload: Payload) -> Tensor:
        out = payload.sent["q"].to(payload.dtype) * payload.derived["scale"]
        return out.reshape(payload.shape)

    def decompress_sum(self, level_sum: Tensor, template: Payload, workers: int) -> Tensor:
        """The average :math:`\\sigma\\sum_m q_m / M` from the summed levels (int64)."""
        out = level_sum.to(template.dtype) * (template.derived["scale"] / workers)
        return out.reshape(template.shape)

    def bits_sent(self, payload: Payload) -> int:
        return payload.numel * self.bits + torch.finfo(payload.dtype).bits

    def field_bits(self, name: str, payload: Payload) -> tuple[int, int] | None:
        return (self.bits, 2 ** (self.bits - 1)) if name == "q" else None
