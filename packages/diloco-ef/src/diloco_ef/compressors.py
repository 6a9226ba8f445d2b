r"""Compressors for pseudo-gradients and gradients, behind one interface.

A compressor maps a tensor :math:`x \in \mathbb{R}^d` to a *payload* (what travels on the wire)
and back: :math:`C(x) = \mathrm{decompress}(\mathrm{compress}(x))`. Its quality on a given input
is the measured contraction factor

.. math:: \alpha(x) = 1 - \frac{\|C(x) - x\|^2}{\|x\|^2},

so :math:`\alpha = 1` is lossless and a :math:`\delta`-contractive compressor in the sense of
error-feedback theory has :math:`\mathbb{E}\,\alpha(x) \ge \delta` for every :math:`x`.

Closed forms the tests check:

- Top-k keeps the :math:`k` largest magnitudes: :math:`\alpha = \sum_{i \in \text{top}}
  x_i^2 / \|x\|^2 \ge k/d`.
- Random-k (unscaled) keeps :math:`k` coordinates drawn uniformly without replacement:
  :math:`\mathbb{E}\,\alpha = k/d`. Scaled by :math:`d/k` it is unbiased instead.
- Scaled sign sends :math:`\frac{\|x\|_1}{d}\,\mathrm{sign}(x)`: :math:`\alpha =
  \|x\|_1^2 / (d\|x\|_2^2)` exactly (deterministic).
- QSGD with :math:`s` levels rounds :math:`r_i = s|x_i|/\|x\|` up with probability
  :math:`f_i = r_i - \lfloor r_i \rfloor`; it is unbiased and
  :math:`\mathbb{E}\|Q(x) - x\|^2 = (\|x\|/s)^2 \sum_i f_i (1 - f_i)`.

Bit accounting (:meth:`Compressor.bits_sent`) counts what a worker must transmit: values at
their dtype's width, indices at the fixed width :math:`\lceil \log_2 d \rceil` (the shortest
code that addresses every coordinate) or as a :math:`d`-bit bitmap when that is shorter,
quantization levels at their bit width plus one sign bit,
and scalars (norms, scales) at the value dtype's width. Random-k sends no indices: every worker
draws the same coordinates from a shared seed. Low-rank (:class:`LowRank`) sends its two factors,
:math:`q(m+n)` values per :math:`m\times n` matrix at the factor dtype's width.

Every compressor takes an optional ``torch.Generator``; the engines derive it from
``(seed, round, tensor)`` (plus the worker id where :attr:`Compressor.shared_randomness` is
False), so a run is reproducible and resumable from its round counter alone.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .kernels.int8 import int8_quantize
from .kernels.quantize import stochastic_quantize
from .kernels.threshold import threshold_select

__all__ = [
    "QSGD",
    "AbsmaxQuant",
    "ApproxTopK",
    "Compressor",
    "Identity",
    "Int8Absmax",
    "LowRank",
    "Payload",
    "RandomK",
    "ScaledSign",
    "TopK",
    "contraction",
    "index_bits",
    "qsgd_expected_alpha",
    "topk_recall",
]


@dataclass
class Payload:
    """What one compressed tensor consists of.

    Attributes:
        sent: the tensors a worker transmits (fixed shapes for a given compressor and input
            size, so engines can all-gather them).
        shape: the shape of the original tensor.
        dtype: the dtype of the original tensor.
        derived: tensors the receiver can recompute without communication (Random-k's shared
            indices); they are never counted as traffic.
    """

    sent: dict[str, Tensor]
    shape: torch.Size
    dtype: torch.dtype
    derived: dict[str, Tensor] = field(default_factory=dict)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def contraction(x: Tensor, cx: Tensor) -> float:
    r"""The measured contraction factor :math:`1 - \|C(x) - x\|^2 / \|x\|^2`.

    Args:
        x: the input.
        cx: its compressed-and-decompressed version, same shape.

    Returns:
        A float; 1.0 for ``x == 0`` (a zero input loses nothing).

    Example:
        >>> contraction(torch.tensor([3.0, 4.0]), torch.tensor([0.0, 4.0]))
        0.64
    """
    if x.shape != cx.shape:
        raise ValueError(f"shapes differ: x {tuple(x.shape)} vs C(x) {tuple(cx.shape)}")
    xd = x.detach().double()
    den = float(xd.pow(2).sum())
    if den == 0.0:
        return 1.0
    return 1.0 - float((cx.detach().double() - xd).pow(2).sum()) / den


def index_bits(d: int) -> int:
    r"""Bits of a fixed-width index into ``d`` coordinates: :math:`\max(1, \lceil\log_2 d\rceil)`.

    Example:
        >>> index_bits(1024), index_bits(1025)
        (10, 11)
    """
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    return max(1, math.ceil(math.log2(d)))


def _value_bits(dtype: torch.dtype) -> int:
    return torch.finfo(dtype).bits


def _check_float(x: Tensor) -> None:
    if not x.is_floating_point():
        raise ValueError(f"compressors take floating tensors, got dtype {x.dtype}")


class Compressor(abc.ABC):
    """Base class: ``compress`` -> :class:`Payload` -> ``decompress``, plus accounting.

    Subclasses set :attr:`shared_randomness` (True when every worker must use the same random
    draw, as Random-k does) and :attr:`all_reducible` (True when the average of the workers'
    decompressed tensors equals the decompression of the averaged ``sent["values"]``, so the
    exchange is one all-reduce).
    """

    shared_randomness: bool = False
    all_reducible: bool = False
    #: True when ``compress`` takes a per-tensor ``state`` dict that persists across calls
    #: (:class:`LowRank`'s warm start); :class:`~diloco_ef.error_feedback.ErrorFeedback` keeps
    #: one such dict per key and checkpoints it.
    stateful: bool = False

    @abc.abstractmethod
    def compress(self, x: Tensor, generator: torch.Generator | None = None) -> Payload: ...

    @abc.abstractmethod
    def decompress(self, payload: Payload) -> Tensor: ...

    @abc.abstractmethod
    def bits_sent(self, payload: Payload) -> int: ...

    def field_bits(self, name: str, payload: Payload) -> tuple[int, int] | None:
        """Wire width of an integer field: ``(bits, offset)`` with ``value + offset`` in
        ``[0, 2**bits)``, so :func:`diloco_ef.wire.encode` packs it; None: raw bytes."""
        return None

    #: attributes that change while running (counters) and are not part of the settings
    _runtime_fields: frozenset[str] = frozenset()

    def config(self) -> str:
        """The settings as a string: equal strings compress alike (used to check that all
        workers, and a checkpoint, use the same compressor)."""
        fields = ", ".join(
            f"{k}={v.config() if isinstance(v, Compressor) else repr(v)}"
            for k, v in sorted(vars(self).items())
            if not k.startswith("_") and k not in self._runtime_fields
        )
        return f"{type(self).__name__}({fields})"

    def __call__(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """``decompress(compress(x))``."""
        return self.decompress(self.compress(x, generator))

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


class Identity(Compressor):
    """No compression: the values travel as they are (all-reducible).

    Example:
        >>> c = Identity()
        >>> p = c.compress(torch.ones(3))
        >>> c.decompress(p), c.bits_sent(p)
        (tensor([1., 1., 1.]), 96)
    """

    all_reducible = True

    def compress(self, x: Tensor, generator: torch.Generator | None = None) -> Payload:
        _check_float(x)
        return Payload({"values": x.detach().reshape(-1).clone()}, x.shape, x.dtype)

    def decompress(self, payload: Payload) -> Tensor:
        return payload.sent["values"].reshape(payload.shape).clone()

    def bits_sent(self, payload: Payload) -> int:
        return payload.numel * _value_bits(payload.dtype)


class _Sparsifier(Compressor):
    """Shared parts of the k-of-d sparsifiers: the choice of k and the scatter back."""

    def __init__(self, k: int | None = None, ratio: float | None = None):
        if (k is None) == (ratio is None):
            raise ValueError(f"give exactly one of k and ratio, got k={k!r}, ratio={ratio!r}")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"k must be an integer >= 1, got {k!r}")
        if ratio is not None and not (0.0 < ratio <= 1.0):
            raise ValueError(f"ratio must lie in (0, 1], got {ratio!r}")
        self.k = k
        self.ratio = ratio

    def k_for(self, d: int) -> int:
        """The number of coordinates kept out of ``d``; raises if a fixed ``k`` exceeds ``d``."""
        if self.k is not None:
            if self.k > d:
                raise ValueError(f"k={self.k} is out of range for a tensor of {d} elements")
            return self.k
        return min(d, max(1, round(self.ratio * d)))

    @staticmethod
    def _scatter(values: Tensor, indices: Tensor, payload: Payload) -> Tensor:
        out = torch.zeros(payload.numel, dtype=payload.dtype, device=values.device)
        out[indices] = values
        return out.reshape(payload.shape)


class TopK(_Sparsifier):
    r"""Exact Top-k: keep the :math:`k` entries of largest magnitude (``torch.topk``).

    Args:
        k: how many entries to keep (1 <= k <= d), or
        ratio: the kept fraction, :math:`k = \max(1, \mathrm{round}(\text{ratio}\cdot d))`.

    Example:
        >>> c = TopK(k=2)
        >>> c(torch.tensor([0.1, -3.0, 2.0, 0.5]))
        tensor([ 0., -3.,  2.,  0.])
    """

    def compress(self, x: Tensor, generator: torch.Generator | None = None) -> Payload:
        _check_float(x)
        flat = x.detach().reshape(-1)
        k = self.k_for(flat.numel())
        idx = torch.topk(flat.abs(), k, sorted=False).indices
        return Payload({"values": flat[idx].clone(), "indices": idx}, x.shape, x.dtype)

    def decompress(self, payload: Payload) -> Tensor:
        return self._scatter(payload.sent["values"], payload.sent["indices"], payload)

    def bits_sent(self, payload: Payload) -> int:
        # Indices at fixed width, or a d-bit bitmap of the kept positions when that is shorter.
        k, d = payload.sent["values"].numel(), payload.numel
        return k * _value_bits(payload.dtype) + min(k * index_bits(d), d)

    def field_bits(self, name: str, payload: Payload) -> tuple[int, int] | None:
        return (index_bits(payload.numel), 0) if name == "indices" else None


class ApproxTopK(TopK):
    r"""Top-k through a magnitude threshold estimated from a random sample.

    Draw :math:`m` magnitudes uniformly (with replacement) and take their empirical
    :math:`1 - (1+\text{slack})k/d` quantile as the threshold :math:`t`. One pass keeps the
    candidates :math:`|x_i| \ge t`; when there are at least :math:`k` of them, they contain every
    true top-k entry (the threshold is then at most the k-th largest magnitude), and an exact
    top-k over the candidates alone returns exactly the top-k. When the sample under-estimated
    the count, the whole tensor falls back to ``torch.topk``. The result is exact whenever no
    ties straddle the threshold; the saving is that ``torch.topk`` runs on
    :math:`\approx(1+\text{slack})k` candidates instead of :math:`d` entries.

    With ``refine=False`` the candidates themselves are sent (about :math:`(1+\text{slack})k`
    of them, a variable count; not all-gatherable across workers).

    Args:
        k, ratio: as for :class:`TopK`.
        sample_size: magnitudes sampled for the threshold (>= 1).
        slack: relative over-selection margin (>= 0).
        refine: cut the candidates down to exactly k.

    Attributes:
        fallbacks: how many calls fell back to the exact path.

    Example:
        >>> c = ApproxTopK(ratio=0.25, sample_size=64)
        >>> x = torch.arange(1.0, 9.0)
        >>> sorted(c.compress(x, torch.Generator().manual_seed(0)).sent["indices"].tolist())
        [6, 7]
    """

    def __init__(
        self,
        k: int | None = None,
        ratio: float | None = None,
        *,
        sample_size: int = 65536,
        slack: float = 0.25,
        refine: bool = True,
    ):
        super().__init__(k=k, ratio=ratio)
        if isinstance(sample_size, bool) or not isinstance(sample_size, int) or sample_size < 1:
            raise ValueError(f"sample_size must be an integer >= 1, got {sample_size!r}")
        if not slack >= 0.0:
            raise ValueError(f"slack must be >= 0, got {slack!r}")
        self.sample_size = sample_size
        self.slack = float(slack)
        self.refine = bool(refine)
        self.fallbacks = 0

    _runtime_fields = frozenset({"fallbacks"})

    def threshold(self, a: Tensor, k: int, generator: torch.Generator | None = None) -> float:
        """The sample estimate of the magnitude above which about ``(1+slack) k`` entries lie."""
        d = a.numel()
        idx = torch.randint(d, (self.sample_size,), generator=generator, device="cpu")
        sample = a[idx.to(a.device)]
        keep_frac = min(1.0, (1.0 + self.slack) * k / d)
        # 1-based rank of the order statistic at the (1 - keep_frac) quantile, clamped to range.
        rank = min(self.sample_size, max(1, math.floor(self.sample_size * (1.0 - keep_frac))))
        return float(torch.kthvalue(sample, rank).values)

    def compress(self, x: Tensor, generator: torch.Generator | None = None) -> Payload:
        _check_float(x)
        flat = x.detach().reshape(-1)
        d = flat.numel()
        k = self.k_for(d)
        a = flat.abs()
        if d <= self.sample_size or k == d:
            idx = torch.topk(a, k, sorted=False).indices
            return Payload({"values": flat[idx].clone(), "indices": idx}, x.shape, x.dtype)
        t = self.threshold(a, k, generator)
        if t <= 0.0:
            # Fewer than about (1+slack)k nonzeros: the sampled quantile is a zero and a
            # threshold of 0 would keep every entry. The top-k then lies among the nonzeros.
            idx = _topk_of_sparse(a, k)
            return Payload({"values": flat[idx].clone(), "indices": idx}, x.shape, x.dtype)
        # The op ``diloco_ef::threshold_select`` (Triton on CUDA): ascending indices of a >= t.
        cand = threshold_select(a, t)
        if cand.numel() >= k:
            idx = cand[torch.topk(a[cand], k, sorted=False).indices] if self.refine else cand
        else:
            self.fallbacks += 1
            idx = torch.topk(a, k, sorted=False).indices
        return Payload({"values": flat[idx].clone(), "indices": idx}, x.shape, x.dtype)


def _topk_of_sparse(a: Tensor, k: int) -> Tensor:
    """Indices of ``k`` largest entries of the magnitudes ``a`` (>= 0), found among its nonzeros.

    With ``nnz >= k`` this is an exact top-k over the nonzeros only. With ``nnz < k`` every
    nonzero belongs to the top-k and the remaining ``k - nnz`` places go to zeros (all tied);
    the first ``k`` positions hold at most ``nnz`` nonzeros, hence at least ``k - nnz`` zeros,
    so the filler is found in them without another pass over the whole tensor.
    """
    nz = torch.nonzero(a).reshape(-1)
    if nz.numel() >= k:
        return nz[torch.topk(a[nz], k, sorted=False).indices]
    zeros = torch.nonzero(a[:k] == 0).reshape(-1)[: k - nz.numel()]
    return torch.cat([nz, zeros])


def topk_recall(x: Tensor, indices: Tensor, k: int) -> float:
    """Fraction of the exact top-k (by magnitude) of ``x`` that ``indices`` contains.

    Example:
        >>> topk_recall(torch.tensor([5.0, 1.0, -4.0, 0.0]), torch.tensor([0, 1]), 2)
        0.5
    """
    flat = x.detach().reshape(-1)
    if not 1 <= k <= flat.numel():
        raise ValueError(f"k={k} is out of range for a tensor of {flat.numel()} elements")
    true = torch.topk(flat.abs(), k, sorted=False).indices
    hit = torch.isin(true, indices.to(true.device))
    return float(hit.sum()) / k


class RandomK(_Sparsifier):
    r"""Random-k: keep :math:`k` coordinates drawn without replacement from a shared seed.

    All workers use the same generator state, so they choose the same coordinates: only the
    :math:`k` values travel and the average over workers is an all-reduce of those values.
    Unscaled (default) it is contractive with :math:`\mathbb{E}\,\alpha = k/d`; with
    ``scaled=True`` the values are multiplied by :math:`d/k`, which makes it unbiased,
    :math:`\mathbb{E}\,C(x) = x`.

    Example:
        >>> c = RandomK(k=2)
        >>> p = c.compress(torch.arange(5.0), torch.Generator().manual_seed(0))
        >>> c.bits_sent(p)  # two float32 values, no indices
        64
    """

    shared_randomness = True
    all_reducible = True

    def __init__(self, k: int | None = None, ratio: float | None = None, *, scaled: bool = False):
        super().__init__(k=k, ratio=ratio)
        self.scaled = bool(scaled)

    def compress(self, x: Tensor, generator: torch.Generator | None = None) -> Payload:
        _check_float(x)
        flat = x.detach().reshape(-1)
        d = flat.numel()
        k = self.k_for(d)
        idx = torch.randperm(d, generator=generator, device="cpu")[:k].to(flat.device)
        values = flat[idx].clone()
        if self.scaled:
            values.mul_(d / k)
        return Payload({"values": values}, x.shape, x.dtype, derived={"indices": idx})

    def decompress(self, payload: Payload) -> Tensor:
        return self._scatter(payload.sent["values"], payload.derived["indices"], payload)

    def bits_sent(self, payload: Payload) -> int:
        return payload.sent["values"].numel() * _value_bits(payload.dtype)


def _check_bits(bits: int, hi: int) -> None:
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= hi:
        raise ValueError(f"bits must be an integer in [1, {hi}], got {bits!r}")


def _level_dtype(levels: int) -> torch.dtype:
    if levels <= 127:
        return torch.int8
    if levels <= 32767:
        return torch.int16
    return torch.int32


def qsgd_expected_alpha(x: Tensor, levels: int) -> float:
    r"""Closed-form :math:`\mathbb{E}\,\alpha` of unscaled QSGD with ``levels`` = s on ``x``.

    :math:`\mathbb{E}\,\alpha = 1 - \sum_i f_i(1-f_i) / s^2` with :math:`f_i` the fractional part
    of :math:`s|x_i|/\|x\|` (the norm factors cancel).

    Example:
        >>> qsgd_expected_alpha(torch.tensor([1.0, 0.0]), 1)
        1.0
    """
    xd = x.detach().double().reshape(-1)
    norm = float(xd.norm())
    if norm == 0.0:
        return 1.0
    r = xd.abs() / norm * levels
    f = r - torch.floor(r)
    return 1.0 - float((f * (1 - f)).sum()) / levels**2


class QSGD(Compressor):
    r"""Stochastic quantization with ``bits`` bits of magnitude per coordinate (QSGD).

    With :math:`s = 2^b - 1` levels and :math:`r_i = s|x_i|/\|x\|_2`, the level is
    :math:`\lfloor r_i\rfloor + \xi_i` with :math:`\xi_i \sim \mathrm{Bernoulli}(r_i -
    \lfloor r_i\rfloor)`, and :math:`Q(x)_i = \|x\|\,\mathrm{sign}(x_i)\,\ell_i / s`, so
    :math:`\mathbb{E}\,Q(x) = x`. Traffic: :math:`b + 1` bits per coordinate (level and sign)
    and one norm.

    ``contractive=True`` divides the output by :math:`1 + \omega`,
    :math:`\omega = \min(d/s^2, \sqrt d/s)` (the variance bound
    :math:`\mathbb{E}\|Q(x)-x\|^2 \le \omega\|x\|^2`), which makes it contractive with
    :math:`\mathbb{E}\,\alpha \ge 1/(1+\omega)`, the form error feedback needs.

    Args:
        bits: magnitude bits b, 1 <= b <= 31.
        contractive: apply the :math:`1/(1+\omega)` scaling.

    Example:
        >>> c = QSGD(bits=4)
        >>> p = c.compress(torch.tensor([3.0, -4.0]), torch.Generator().manual_seed(0))
        >>> c.bits_sent(p)  # 2 coordinates x (4 + 1) bits + a float32 norm
        42
    """

    def __init__(self, bits: int, *, contractive: bool = False):
        _check_bits(bits, 31)
        self.bits = bits
        self.contractive = bool(contractive)

    @property
    def levels(self) -> int:
        return 2**self.bits - 1

    def omega(self, d: int) -> float:
        """The variance bound :math:`\\min(d/s^2, \\sqrt d/s)` for a d-vector."""
        s = self.levels
        return min(d / s**2, math.sqrt(d) / s)

    def compress(self, x: Tensor, generator: torch.Generator | None = None) -> Payload:
        _check_float(x)
        flat = x.detach().reshape(-1)
        s = self.levels
        norm = flat.norm()
        if float(norm) == 0.0:
            q = torch.zeros(flat.numel(), dtype=_level_dtype(s), device=flat.device)
        else:
            u = torch.rand(flat.numel(), generator=generator, dtype=flat.dtype, device="cpu")
            # The fused op (Triton on CUDA, the torch reference elsewhere).
            lvl = stochastic_quantize(flat, u.to(flat.device), s / float(norm), s)
            q = lvl.to(_level_dtype(s))
        return Payload({"levels": q, "norm": norm.reshape(1).clone()}, x.shape, x.dtype)

    def decompress(self, payload: Payload) -> Tensor:
        q = payload.sent["levels"].to(payload.dtype)
        out = q * (payload.sent["norm"] / self.levels)
        if self.contractive:
            out = out / (1.0 + self.omega(payload.numel))
        return out.reshape(payload.shape)

    def bits_sent(self, payload: Payload) -> int:
        return payload.numel * (self.bits + 1) + _value_bits(payload.dtype)

    def field_bits(self, name: str, payload: Payload) -> tuple[int, int] | None:
        # signed levels in [-(2^b - 1), 2^b - 1]: b magnitude bits and a sign
        return (self.bits + 1, 2**self.bits) if name == "levels" else None


class Int8Absmax(Compressor):
    r"""Deterministic int8 quantization with an absmax scale.

    :math:`\sigma = \max_i |x_i| / 127`, :math:`q_i = \mathrm{round}(x_i/\sigma) \in
    [-127, 127]`, :math:`C(x) = \sigma q`. Biased, error at most :math:`\sigma/2` per coordinate.
    Traffic: 8 bits per coordinate and one scale.

    Example:
        >>> c = Int8Absmax()
        >>> c(torch.tensor([1.27, -0.5, 0.0]))
        tensor([ 1.2700, -0.5000,  0.0000])
    """

    def compress(self, x: Tensor, generator: torch.Generator | None = None) -> Payload:
        _check_float(x)
        flat = x.detach().reshape(-1)
        scale = flat.abs().max() / 127.0 if flat.numel() else flat.new_zeros(())
        if float(scale) == 0.0:
            q = torch.zeros(flat.numel(), dtype=torch.int8, device=flat.device)
        else:
            # The fused op (Triton on CUDA, the torch reference elsewhere).
            q = int8_quantize(flat, float(scale))
        return Payload({"q": q, "scale": scale.reshape(1).clone()}, x.shape, x.dtype)

    def decompress(self, payload: Payload) -> Tensor:
        out = payload.sent["q"].to(payload.dtype) * payload.sent["scale"]
        return out.reshape(payload.shape)

    def bits_sent(self, payload: Payload) -> int:
        return payload.numel * 8 + _value_bits(payload.dtype)

    def field_bits(self, name: str, payload: Payload) -> tuple[int, int] | None:
        return (8, 128) if name == "q" else None


class AbsmaxQuant(Compressor):
    r"""Deterministic b-bit quantization with an absmax scale (the b-bit sibling of int8).

    With :math:`s = 2^{b-1} - 1` levels on each side, :math:`\sigma = \max_i |x_i| / s`,
    :math:`q_i = \mathrm{round}(x_i/\sigma) \in [-s, s]` and :math:`C(x) = \sigma q`. Biased.
    Each coordinate's error is at most :math:`\min(\sigma/2, |x_i|)` (0 is a level) and the
    largest entry is sent exactly, so :math:`\alpha \ge \max\big(\max_i x_i^2/\|x\|^2,\ 1 -
    d\sigma^2/(4\|x\|^2)\big) \ge 1/d`: contractive, as error feedback needs. Traffic: b bits
    per coordinate (a sign and :math:`b - 1` magnitude bits) and one scale. ``bits=8`` equals
    :class:`Int8Absmax`.

    The rounding is the op ``diloco_ef::int8_quantize`` (Triton on CUDA) at scale
    :math:`\sigma`; :math:`|x_i|/\sigma \le s` makes its clamp at 127 inactive.

    Args:
        bits: 2 <= b <= 8.

    Example:
        >>> c = AbsmaxQuant(bits=3)  # levels -3..3
        >>> c(torch.tensor([3.0, -1.2, 0.4]))
        tensor([ 3., -1.,  0.])
        >>> c.bits_sent(c.compress(torch.ones(10)))  # 10 x 3 bits + a float32 scale
        62
    """

    def __init__(self, bits: int):
        if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 8:
            raise ValueError(f"bits must be an integer in [2, 8], got {bits!r}")
        self.bits = bits

    @property
    def levels(self) -> int:
        return 2 ** (self.bits - 1) - 1

    def compress(self, x: Tensor, generator: torch.Generator | None = None) -> Payload:
        _check_float(x)
        flat = x.detach().reshape(-1)
        s = self.levels
        scale = flat.abs().max() / s if flat.numel() else flat.new_zeros(())
        if float(scale) == 0.0:
            q = torch.zeros(flat.numel(), dtype=torch.int8, device=flat.device)
        else:
            q = int8_quantize(flat, float(scale)).clamp_(-s, s)
        return Payload({"q": q, "scale": scale.reshape(1).clone()}, x.shape, x.dtype)

    def decompress(self, payload: Payload) -> Tensor:
        out = payload.sent["q"].to(payload.dtype) * payload.sent["scale"]
        return out.reshape(payload.shape)

    def bits_sent(self, payload: Payload) -> int:
        return payload.numel * self.bits + _value_bits(payload.dtype)

    def field_bits(self, name: str, payload: Payload) -> tuple[int, int] | None:
        # levels in [-s, s], s = 2^(b-1) - 1, shifted to [1, 2^b - 1]
        return (self.bits, 2 ** (self.bits - 1)) if name == "q" else None


class ScaledSign(Compressor):
    r"""1-bit compression: the signs and one scale, :math:`C(x) = \frac{\|x\|_1}{d}\,\sigma(x)`.

    :math:`\sigma_i = +1` for :math:`x_i \ge 0` and :math:`-1` otherwise (one bit each). The
    scale :math:`m = \|x\|_1/d` minimises :math:`\|m\sigma - x\|^2` over :math:`m`, and since
    :math:`\sigma_i x_i = |x_i|`, :math:`\|C(x) - x\|^2 = \|x\|^2 - d m^2`, i.e.

    .. math:: \alpha = \frac{\|x\|_1^2}{d\,\|x\|_2^2} \in [1/d, 1],

    deterministic and contractive (the compressor of EF-signSGD). Traffic: d bits and one
    scale; the payload carries the signs as uint8 0/1 (the count is what a packed bitmap sends).

    Example:
        >>> c = ScaledSign()
        >>> c(torch.tensor([3.0, -1.0, 0.0, 4.0]))
        tensor([ 2., -2.,  2.,  2.])
        >>> c.bits_sent(c.compress(torch.ones(10)))  # 10 bits + a float32 scale
        42
    """

    def compress(self, x: Tensor, generator: torch.Generator | None = None) -> Payload:
        _check_float(x)
        flat = x.detach().reshape(-1)
        scale = flat.abs().mean() if flat.numel() else flat.new_zeros(())
        signs = (flat >= 0).to(torch.uint8)
        return Payload({"signs": signs, "scale": scale.reshape(1).clone()}, x.shape, x.dtype)

    def decompress(self, payload: Payload) -> Tensor:
        pm = payload.sent["signs"].to(payload.dtype).mul_(2.0).sub_(1.0)
        return (pm * payload.sent["scale"]).reshape(payload.shape)

    def bits_sent(self, payload: Payload) -> int:
        return payload.numel + _value_bits(payload.dtype)

    def field_bits(self, name: str, payload: Payload) -> tuple[int, int] | None:
        return (1, 0) if name == "signs" else None


_FALLBACK = "fallback/"


def _orthonormal_columns(a: Tensor) -> Tensor:
    """An orthonormal basis (as columns) of a span containing ``range(a)``: reduced QR's Q.

    Householder QR returns orthonormal columns even when ``a`` is rank deficient (its extra
    columns then span directions outside ``range(a)``), so the projection below stays a
    projection for every input, including zero.
    """
    return torch.linalg.qr(a, mode="reduced").Q


class LowRank(Compressor):
    r"""PowerSGD-style rank-q compression of matrices with a warm-started power iteration.

    A tensor of two or more dimensions is viewed as the matrix :math:`M \in \mathbb{R}^{m\times
    n}`, :math:`m` = its first dimension, :math:`n` = the product of the others. With
    :math:`r = \min(q, m, n)` and a start :math:`Q_0 \in \mathbb{R}^{n\times r}` (the previous
    call's :math:`Q` for the same tensor when a ``state`` dict is passed, the *warm start*;
    Gaussian from ``generator`` on the first call), each power iteration is

    .. math:: P = \mathrm{orth}(M Q), \qquad Q = M^\top P,

    and :math:`C(M) = P Q^\top = P P^\top M`, the orthogonal projection of :math:`M`'s columns
    onto :math:`\mathrm{span}(P)`. Hence :math:`\|C(M) - M\|^2 = \|M\|^2 - \|Q\|^2` and

    .. math:: \alpha = \|P^\top M\|_F^2 / \|M\|_F^2 \in [0, 1],

    at most the Eckart-Young value :math:`\sum_{i\le r}\sigma_i^2/\sum_i\sigma_i^2`, which it
    reaches when :math:`\mathrm{span}(P)` is the top-r left singular space. Repeated calls on
    the same (or a slowly changing) matrix are subspace iteration: the captured subspace
    approaches the top-r one at the rate :math:`(\sigma_{r+1}/\sigma_r)^{2}` per call. There is
    no worst-case lower bound on :math:`\alpha` for one call (a start orthogonal to the top
    directions captures little), so, as with the other compressors, the measured
    :math:`\alpha` is reported each round; error feedback needs it positive on average.

    Traffic: :math:`P` and :math:`Q`, :math:`r(m+n)` values at the width of ``factor_dtype``
    (default: the input's dtype; ``torch.bfloat16`` halves it, and the rounding of the factors
    is then part of the measured error). When :math:`r(m+n) \ge mn` the factors would cost at
    least as much as the matrix, so the matrix itself is sent (at ``factor_dtype``).

    Tensors of fewer than two dimensions (biases, norms' gains) go through ``fallback``
    (default :class:`Identity`, i.e. dense), whose payload and bit count are used unchanged.
    The fallback must be stateless and use no shared randomness (each worker's payload is
    decompressed on its own).

    Args:
        rank: q >= 1.
        fallback: the compressor for tensors with ``ndim < 2``.
        factor_dtype: floating dtype of the transmitted factors (None: the input's).
        power_iterations: iterations per call (>= 1; PowerSGD uses one with the warm start).

    Example:
        >>> c = LowRank(rank=1)
        >>> m = torch.outer(torch.tensor([1.0, 2.0, 2.0]), torch.tensor([3.0, 0.0, 4.0, 0.0]))
        >>> p = c.compress(m, torch.Generator().manual_seed(0))
        >>> torch.allclose(c.decompress(p), m), c.bits_sent(p)  # rank one: exact; (3+4) x 32
        (True, 224)
    """

    stateful = True

    def __init__(
        self,
        rank: int,
        *,
        fallback: Compressor | None = None,
        factor_dtype: torch.dtype | None = None,
        power_iterations: int = 1,
    ):
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"rank must be an integer >= 1, got {rank!r}")
        if (
            isinstance(power_iterations, bool)
            or not isinstance(power_iterations, int)
            or power_iterations < 1
        ):
            raise ValueError(f"power_iterations must be an integer >= 1, got {power_iterations!r}")
        fallback = Identity() if fallback is None else fallback
        if not isinstance(fallback, Compressor):
            raise ValueError(f"fallback must be a Compressor, got {fallback!r}")
        if fallback.stateful or fallback.shared_randomness:
            raise ValueError(
                f"fallback must be stateless and use no shared randomness, got {fallback!r}"
            )
        if factor_dtype is not None and not factor_dtype.is_floating_point:
            raise ValueError(f"factor_dtype must be a floating dtype, got {factor_dtype!r}")
        self.rank = rank
        self.fallback = fallback
        self.factor_dtype = factor_dtype
        self.power_iterations = power_iterations

    def compress(
        self,
        x: Tensor,
        generator: torch.Generator | None = None,
        state: dict[str, Tensor] | None = None,
    ) -> Payload:
        """Compress ``x``; ``state`` (if given) holds and receives the warm-start ``"q"``."""
        _check_float(x)
        if x.dim() < 2:
            inner = self.fallback.compress(x, generator)
            sent = {_FALLBACK + k: v for k, v in inner.sent.items()}
            derived = {_FALLBACK + k: v for k, v in inner.derived.items()}
            return Payload(sent, x.shape, x.dtype, derived)
        fdt = self.factor_dtype or x.dtype
        m_rows = x.shape[0]
        mat = x.detach().reshape(m_rows, -1)
        n_cols = mat.shape[1]
        r = min(self.rank, m_rows, n_cols)
        if r * (m_rows + n_cols) >= m_rows * n_cols:
            return Payload({"values": mat.reshape(-1).to(fdt).clone()}, x.shape, x.dtype)
        work = mat if mat.dtype in (torch.float32, torch.float64) else mat.float()
        q = None if state is None else state.get("q")
        if q is None or q.shape != (n_cols, r):
            q = torch.randn(n_cols, r, generator=generator, dtype=work.dtype, device="cpu")
        q = q.to(device=work.device, dtype=work.dtype)
        for _ in range(self.power_iterations):
            p = _orthonormal_columns(work @ q)
            q = work.T @ p
        if state is not None:
            state["q"] = q.detach().clone()
        return Payload({"p": p.to(fdt), "q": q.to(fdt)}, x.shape, x.dtype)

    def _fallback_payload(self, payload: Payload) -> Payload | None:
        if not any(k.startswith(_FALLBACK) for k in payload.sent):
            return None
        n = len(_FALLBACK)
        return Payload(
            {k[n:]: v for k, v in payload.sent.items()},
            payload.shape,
            payload.dtype,
            {k[n:]: v for k, v in payload.derived.items()},
        )

    def decompress(self, payload: Payload) -> Tensor:
        inner = self._fallback_payload(payload)
        if inner is not None:
            return self.fallback.decompress(inner)
        if "values" in payload.sent:
            return payload.sent["values"].to(payload.dtype).reshape(payload.shape).clone()
        p = payload.sent["p"].to(payload.dtype)
        q = payload.sent["q"].to(payload.dtype)
        return (p @ q.T).reshape(payload.shape)

    def bits_sent(self, payload: Payload) -> int:
        inner = self._fallback_payload(payload)
        if inner is not None:
            return self.fallback.bits_sent(inner)
        return sum(t.numel() * _value_bits(t.dtype) for t in payload.sent.values())

    def field_bits(self, name: str, payload: Payload) -> tuple[int, int] | None:
        inner = self._fallback_payload(payload)
        if inner is None or not name.startswith(_FALLBACK):
            return None
        return self.fallback.field_bits(name[len(_FALLBACK) :], inner)
