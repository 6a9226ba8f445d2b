r"""A seeded random sketch generated on the fly: :math:`Y = G S / \sqrt{k}` without storing S.

Entry :math:`S_{rc}` of the :math:`p \times k` sketch is a pure function of (seed, row, col)
through a counter-based hash (the 32-bit ``lowbias32`` finaliser, applied to the row, the
column and their combination):

.. math::
    h = \mathrm{mix}(\mathrm{mix}(r \oplus s_1) \oplus \mathrm{mix}(c \oplus s_2)),\qquad
    S_{rc} = \begin{cases} 1 - 2\,\lfloor h / 2^{31} \rfloor & \text{Rademacher} \\
    \sqrt{-2\ln u_1}\cos(2\pi u_2) & \text{Gaussian (Box--Muller)} \end{cases}

with :math:`u_1 = (\lfloor h/2^8\rfloor + \tfrac12)/2^{24} \in (0, 1)` and
:math:`u_2 = \lfloor \mathrm{mix}(h \oplus c_0)/2^8\rfloor / 2^{24}`, and
:math:`s_1, s_2` derived from the seed. Because every entry is recomputed from its indices,
the Triton kernel never materialises the :math:`p \times k` matrix (at :math:`p = 10^7`,
:math:`k = 4096` that matrix is 160 GB in float32), any block of rows can be generated
independently (streaming over parameters), and the torch reference produces the *same*
matrix: Rademacher entries bit for bit, Gaussian entries up to the last-ulp differences of
``log``/``cos`` between libraries.

- :func:`sketch_block_reference`: rows ``[row0, row0 + rows)`` of S (CPU: numpy uint32 hash;
  other devices: torch int64);
- :func:`sketch_project_reference`: :math:`G S/\sqrt{k}` blockwise over rows (bounded memory);
- :func:`sketch_block_triton`, :func:`sketch_project_triton`: the Triton launchers;
- :func:`sketch_project`: the op ``trak_theory::sketch_project`` (CUDA: Triton, else torch).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from shared_core.kernels import HAS_TRITON, autotune_configs, check_launchable, require_triton

if HAS_TRITON:
    import triton
    import triton.language as tl

__all__ = [
    "KINDS",
    "seed_words",
    "sketch_block_reference",
    "sketch_block_triton",
    "sketch_project",
    "sketch_project_reference",
    "sketch_project_triton",
]

KINDS = ("rademacher", "gaussian")
_M32 = 0xFFFFFFFF
_C1, _C2 = 0x7FEB352D, 0x846CA68B
_GAUSS_SALT = 0x68E31DA4
_TWO_PI = 6.283185307179586


def _kind_id(kind: str) -> int:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return KINDS.index(kind)


def _mix_int(x: int) -> int:
    x &= _M32
    x ^= x >> 16
    x = (x * _C1) & _M32
    x ^= x >> 15
    x = (x * _C2) & _M32
    return x ^ (x >> 16)


def seed_words(seed: int) -> tuple[int, int]:
    """The two 32-bit words :math:`(s_1, s_2)` a 64-bit seed is hashed into."""
    if not isinstance(seed, int) or seed < 0 or seed >= 2**63:
        raise ValueError(f"seed must be an int in [0, 2**63), got {seed!r}")
    s1 = _mix_int((seed & _M32) ^ 0x9E3779B9)
    s2 = _mix_int(s1 ^ (seed >> 32) ^ 0x85EBCA6B)
    return s1, s2


def _mix_t(x: Tensor) -> Tensor:
    # int64 holding values in [0, 2^32): products wrap in two's complement, the mask keeps the
    # low 32 bits, which are exactly the uint32 product the kernel computes.
    x = x ^ (x >> 16)
    x = (x * _C1) & _M32
    x = x ^ (x >> 15)
    x = (x * _C2) & _M32
    return x ^ (x >> 16)


def _check_dims(row0: int, rows: int, k: int) -> None:
    if row0 < 0 or rows < 0 or k < 1:
        raise ValueError(f"need row0 >= 0, rows >= 0, k >= 1; got {row0}, {rows}, {k}")
    if row0 + rows > 2**32:
        raise ValueError(f"sketch rows are indexed in 32 bits; row0 + rows = {row0 + rows}")


def _mix_np(x: np.ndarray) -> np.ndarray:
    # the same finaliser on uint32 arrays, in place: numpy's uint32 products wrap mod 2^32 and
    # its shifts are logical, so this is the kernel's arithmetic at a quarter of the traffic of
    # the int64 torch version
    x ^= x >> np.uint32(16)
    x *= np.uint32(_C1)
    x ^= x >> np.uint32(15)
    x *= np.uint32(_C2)
    x ^= x >> np.uint32(16)
    return x


def _hash_block_np(s1: int, s2: int, row0: int, rows: int, k: int) -> np.ndarray:
    r = _mix_np(np.arange(row0, row0 + rows, dtype=np.uint64).astype(np.uint32) ^ np.uint32(s1))
    c = _mix_np(np.arange(k, dtype=np.uint32) ^ np.uint32(s2))
    return _mix_np(r[:, None] ^ c[None, :])


def _hash_block_torch(s1: int, s2: int, row0: int, rows: int, k: int, device) -> Tensor:
    r = torch.arange(row0, row0 + rows, dtype=torch.int64, device=device)
    c = torch.arange(k, dtype=torch.int64, device=device)
    return _mix_t(_mix_t(r ^ s1)[:, None] ^ _mix_t(c ^ s2)[None, :])


def sketch_block_reference(
    seed: int, row0: int, rows: int, k: int, kind: str = "rademacher", device=None
) -> Tensor:
    """Rows ``row0 .. row0+rows-1`` of the unscaled sketch S (float32, entries of unit variance).

    On the CPU the hash runs on numpy uint32 arrays (in place); elsewhere on int64 tensors
    masked to 32 bits. Both are the kernel's integer arithmetic, so the bits agree.

    Example:
        >>> s = sketch_block_reference(7, 0, 3, 5)
        >>> s.shape, bool((s.abs() == 1).all())
        (torch.Size([3, 5]), True)
    """
    kid = _kind_id(kind)
    _check_dims(row0, rows, k)
    s1, s2 = seed_words(seed)
    on_cpu = device is None or torch.device(device).type == "cpu"
    if on_cpu:
        h = _hash_block_np(s1, s2, row0, rows, k)
        if kid == 0:
            out = (h >> np.uint32(31)).astype(np.float32)
            out *= -2.0
            out += 1.0
            return torch.from_numpy(out)
        h2 = _mix_np(h ^ np.uint32(_GAUSS_SALT))
        h >>= np.uint32(8)
        h2 >>= np.uint32(8)
        u1 = (torch.from_numpy(h.astype(np.float32)) + 0.5) * (2.0**-24)
        u2 = torch.from_numpy(h2.astype(np.float32)) * (2.0**-24)
        return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(_TWO_PI * u2)
    h = _hash_block_torch(s1, s2, row0, rows, k, device)
    if kid == 0:
        return (1 - 2 * (h >> 31)).to(torch.float32)
    u1 = ((h >> 8).to(torch.float32) + 0.5) * (2.0**-24)
    u2 = (_mix_t(h ^ _GAUSS_SALT) >> 8).to(torch.float32) * (2.0**-24)
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(_TWO_PI * u2)


def _check_project(g: Tensor, k: int) -> None:
    if g.dim() != 2:
        raise ValueError(f"g must be 2-D (examples x parameters), got shape {tuple(g.shape)}")
    if not g.is_floating_point():
        raise ValueError(f"g must be floating point, got {g.dtype}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


def sketch_project_reference(
    g: Tensor,
    seed: int,
    k: int,
    kind: str = "rademacher",
    row_offset: int = 0,
    block_rows: int = 4096,
) -> Tensor:
    r""":math:`G\,S[\text{row\_offset} : \text{row\_offset}+p] / \sqrt{k}` in float32.

    The sketch is generated ``block_rows`` rows at a time, so memory is
    :math:`O(\text{block\_rows}\cdot k + n k)` whatever p is.

    Args:
        g: (n, p) rows to project (per-example gradients).
        seed: the sketch's seed; the same seed gives the same sketch everywhere.
        k: the sketch dimension.
        kind: ``"rademacher"`` or ``"gaussian"``.
        row_offset: first sketch row used (to project a slice of the parameters).
        block_rows: rows of S generated at once.

    Returns:
        (n, k) float32 tensor.

    Example:
        >>> y = sketch_project_reference(torch.randn(4, 300), seed=1, k=16)
        >>> y.shape
        torch.Size([4, 16])
    """
    _check_project(g, k)
    n, p = g.shape
    _check_dims(row_offset, p, k)
    if block_rows < 1:
        raise ValueError(f"block_rows must be >= 1, got {block_rows}")
    out = torch.zeros(n, k, dtype=torch.float32, device=g.device)
    gf = g.to(torch.float32)
    for r0 in range(0, p, block_rows):
        r1 = min(p, r0 + block_rows)
        s = sketch_block_reference(seed, row_offset + r0, r1 - r0, k, kind, device=g.device)
        out.addmm_(gf[:, r0:r1], s)
    return out.mul_(1.0 / math.sqrt(k))


if HAS_TRITON:

    @triton.jit
    def _mix(x):
        x = x ^ (x >> 16)
        x = x * 0x7FEB352D
        x = x ^ (x >> 15)
        x = x * 0x846CA68B
        return x ^ (x >> 16)

    @triton.jit
    def _sketch_tile(rows, cols, s1, s2, KIND: tl.constexpr):
        # rows, cols: uint32 index vectors; s1, s2: uint32 scalars.
        hr = _mix(rows ^ s1)
        hc = _mix(cols ^ s2)
        h = _mix(hr[:, None] ^ hc[None, :])
        if KIND == 0:
            val = 1.0 - 2.0 * (h >> 31).to(tl.float32)
        else:
            u1 = ((h >> 8).to(tl.float32) + 0.5) * 5.9604644775390625e-08
            u2 = (_mix(h ^ 0x68E31DA4) >> 8).to(tl.float32) * 5.9604644775390625e-08
            val = tl.sqrt(-2.0 * tl.log(u1)) * tl.cos(6.283185307179586 * u2)
        return val

    @triton.jit
    def _block_kernel(
        out_ptr, row0, rows, k, s1, s2, KIND: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr
    ):
        pr = tl.program_id(0)
        pc = tl.program_id(1)
        r = pr * BR + tl.arange(0, BR)
        c = pc * BC + tl.arange(0, BC)
        rr = (r.to(tl.int64) + row0).to(tl.uint32)
        val = _sketch_tile(rr, c.to(tl.uint32), s1.to(tl.uint32), s2.to(tl.uint32), KIND)
        mask = (r[:, None] < rows) & (c[None, :] < k)
        tl.store(out_ptr + r[:, None].to(tl.int64) * k + c[None, :], val, mask=mask)

    @triton.autotune(
        configs=autotune_configs(
            [
                triton.Config({"BM": 64, "BN": 64, "BK": 32}, num_warps=4),
                triton.Config({"BM": 128, "BN": 128, "BK": 32}, num_warps=8),
                triton.Config({"BM": 64, "BN": 128, "BK": 64}, num_warps=4),
                triton.Config({"BM": 128, "BN": 64, "BK": 64}, num_warps=4),
            ]
        ),
        key=["n", "p", "k"],
    )
    @triton.jit
    def _project_kernel(
        g_ptr,
        out_ptr,
        n,
        p,
        k,
        stride_gn,
        row0,
        s1,
        s2,
        scale,
        KIND: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
    ):
        pm = tl.program_id(0)
        pn = tl.program_id(1)
        m = pm * BM + tl.arange(0, BM)
        c = pn * BN + tl.arange(0, BN)
        s1u = s1.to(tl.uint32)
        s2u = s2.to(tl.uint32)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for r0 in range(0, p, BK):
            r = r0 + tl.arange(0, BK)
            gt = tl.load(
                g_ptr + m[:, None].to(tl.int64) * stride_gn + r[None, :],
                mask=(m[:, None] < n) & (r[None, :] < p),
                other=0.0,
            ).to(tl.float32)
            st = _sketch_tile(
                (r.to(tl.int64) + row0).to(tl.uint32), c.to(tl.uint32), s1u, s2u, KIND
            )
            # masked rows of g are zero, so sketch rows past p contribute nothing
            acc += tl.dot(gt, st, input_precision="ieee")
        tl.store(
            out_ptr + m[:, None].to(tl.int64) * k + c[None, :],
            acc * scale,
            mask=(m[:, None] < n) & (c[None, :] < k),
        )


def sketch_block_triton(
    seed: int, row0: int, rows: int, k: int, kind: str = "rademacher", device="cuda"
) -> Tensor:
    """The Triton twin of :func:`sketch_block_reference` (materialises the block; for tests)."""
    require_triton("sketch_block_triton")
    kid = _kind_id(kind)
    _check_dims(row0, rows, k)
    s1, s2 = seed_words(seed)
    out = torch.empty(rows, k, dtype=torch.float32, device=device)
    check_launchable(out)
    if rows:
        grid = (triton.cdiv(rows, 32), triton.cdiv(k, 32))
        _block_kernel[grid](out, row0, rows, k, s1, s2, KIND=kid, BR=32, BC=32)
    return out


def sketch_project_triton(
    g: Tensor, seed: int, k: int, kind: str = "rademacher", row_offset: int = 0
) -> Tensor:
    """The fused Triton projection: S tiles are hashed in registers, never stored."""
    require_triton("sketch_project_triton")
    check_launchable(g)
    kid = _kind_id(kind)
    _check_project(g, k)
    n, p = g.shape
    _check_dims(row_offset, p, k)
    s1, s2 = seed_words(seed)
    gc = g if g.stride(-1) == 1 else g.contiguous()
    out = torch.empty(n, k, dtype=torch.float32, device=g.device)
    if n == 0:
        return out
    if p == 0:
        return out.zero_()

    def grid(meta):
        return (triton.cdiv(n, meta["BM"]), triton.cdiv(k, meta["BN"]))

    _project_kernel[grid](
        gc, out, n, p, k, gc.stride(0), row_offset, s1, s2, 1.0 / math.sqrt(k), KIND=kid
    )
    return out


@torch.library.custom_op("trak_theory::sketch_project", mutates_args=())
def sketch_project(g: Tensor, seed: int, k: int, kind: str, row_offset: int) -> Tensor:
    r""":math:`G S / \sqrt{k}` with the seeded on-the-fly sketch S, dispatching by device.

    CUDA tensors run the fused Triton kernel; every other device the blockwise reference.

    Args:
        g: (n, p) floating tensor.
        seed: sketch seed in [0, 2**63).
        k: sketch dimension.
        kind: ``"rademacher"`` or ``"gaussian"``.
        row_offset: index of the first sketch row (parameter offset).

    Returns:
        (n, k) float32 tensor.

    Example:
        >>> sketch_project(torch.randn(3, 50), 0, 8, "rademacher", 0).shape
        torch.Size([3, 8])
    """
    return sketch_project_reference(g, seed, k, kind, row_offset)


@sketch_project.register_kernel("cuda")
def _sketch_project_cuda(g: Tensor, seed: int, k: int, kind: str, row_offset: int) -> Tensor:
    if not HAS_TRITON:
        return sketch_project_reference(g, seed, k, kind, row_offset)
    return sketch_project_triton(g, seed, k, kind, row_offset)


@sketch_project.register_fake
def _sketch_project_fake(g: Tensor, seed: int, k: int, kind: str, row_offset: int) -> Tensor:
    return g.new_empty(g.shape[0], k, dtype=torch.float32)
