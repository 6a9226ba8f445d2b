r"""Unitarily invariant norms and their LMO on block-diagonal matrices.

Every intrinsic LMO of this package ends in one computation: the LMO of a unitarily invariant
norm :math:`N` at a block-diagonal matrix :math:`\mathrm{diag}(G_1, \dots, G_k)`. The singular
values of a block-diagonal matrix are the union of the blocks' singular values, and its singular
vectors can be chosen block by block, so

.. math::

    \mathrm{LMO}_N(\mathrm{diag}(G_i)) = \mathrm{diag}(-U_i\, h(\Sigma_i)\, V_i^\top)

with one scalar function :math:`h` applied to all singular values jointly (for Schatten-p the
normalisation :math:`\|s\|_q^{q-1}` runs over every block). The result is again block diagonal,
and every block keeps its input's row and column spaces once zero singular values are mapped
to zero (which is what makes the image of a tangent space closed under the LMO).

- spectral (:math:`p = \infty`): :math:`h = 1` on nonzero singular values: ``-polar(G_i)``;
- Frobenius (:math:`p = 2`): :math:`-G_i / \|(G_1, \dots, G_k)\|_F`;
- nuclear (:math:`p = 1`): :math:`-u v^\top` for the largest singular pair over all blocks;
- Schatten-p: :math:`h(s) = s^{q-1} / \|s\|_q^{q-1}`, :math:`1/p + 1/q = 1`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from shared_core.lmo.schatten import check_p, dual_exponent
from shared_core.polar import auto_method, default_rtol, gram_polar, msign, significant

__all__ = [
    "NormSpec",
    "block_lmo",
    "block_norm",
    "dual_scale",
    "masked_polar",
    "parse_norm",
    "resolve_polar",
    "sv_weights",
]

_NAMES = ("spectral", "frobenius", "nuclear")
POLAR_METHODS = ("auto", "svd", "gram", "polar_express", "muon", "rms5")


@dataclass(frozen=True)
class NormSpec:
    """A Schatten-p norm, :math:`1 \\le p \\le \\infty` (spectral, Frobenius, nuclear by name)."""

    p: float

    @property
    def name(self) -> str:
        if math.isinf(self.p):
            return "spectral"
        if self.p == 2:
            return "frobenius"
        if self.p == 1:
            return "nuclear"
        return f"schatten-{self.p:g}"


def parse_norm(norm: object) -> NormSpec:
    """``"spectral" | "frobenius" | "nuclear" | ("schatten", p)`` as a :class:`NormSpec`.

    Raises:
        ValueError: any other value (the message lists the valid ones).

    Example:
        >>> parse_norm(("schatten", 2)).name
        'frobenius'
    """
    if isinstance(norm, NormSpec):
        return norm
    if isinstance(norm, str):
        key = norm.lower()
        if key in _NAMES:
            return NormSpec({"spectral": math.inf, "frobenius": 2.0, "nuclear": 1.0}[key])
    elif isinstance(norm, (tuple, list)) and len(norm) == 2 and str(norm[0]).lower() == "schatten":
        return NormSpec(check_p(norm[1]))
    raise ValueError(
        f"unknown norm {norm!r}; use 'spectral', 'frobenius', 'nuclear' or ('schatten', p) "
        "with 1 <= p <= inf"
    )


def resolve_polar(method: str, G: Tensor) -> str:
    """The polar route for ``G``: ``"svd"`` (exact, zero singular values kept at zero),
    ``"gram"`` (exact for elongated matrices, through the eigendecomposition of the small Gram
    matrix, :func:`shared_core.polar.gram_polar`) or a Newton-Schulz table of
    :func:`shared_core.polar.msign`.

    ``"auto"`` is shared-core's one policy, :func:`shared_core.polar.auto_method` (the SVD for
    float64; on the CPU the Gram route for elongated blocks, the SVD for small single
    matrices; Polar Express otherwise; its docstring has the timings). For float32 input both
    exact routes zero the singular values below ``max(m, n)`` float32 epsilons of the
    largest; above it the Gram route's error on a singular direction of relative size ``t`` is
    about ``max(m, n) * eps64 / t**2`` (float32 round-off for ``t >~ 1e-2``, 2e-6 at the
    cut-off of a 4096-row block).
    """
    if method not in POLAR_METHODS:
        raise ValueError(f"unknown polar method {method!r}; use one of {POLAR_METHODS}")
    if method != "auto":
        return method
    return auto_method(G)


def _mask(s: Tensor, shape: tuple[int, int]) -> Tensor:
    # Singular values below shared-core's cut-off are numerical zeros: their singular vectors
    # are arbitrary and would leak out of the block's row/column spaces.
    return significant(s, default_rtol(*shape, s.dtype))


def masked_polar(G: Tensor) -> Tensor:
    r"""Exact polar factor :math:`U\,\mathrm{diag}(1[s_i > \mathrm{tol}])\,V^\top` by SVD.

    Zero singular values map to zero (unlike a plain :math:`UV^\top`), so the result keeps the
    row and column spaces of ``G`` even when ``G`` is rank deficient (a skew matrix of odd size,
    a Grassmann gradient with ``n < 2p``).

    Example:
        >>> A = torch.tensor([[0.0, 2.0, 0.0], [-2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
        >>> masked_polar(A)
        tensor([[ 0.,  1.,  0.],
                [-1.,  0.,  0.],
                [ 0.,  0.,  0.]])
    """
    u, s, vh = torch.linalg.svd(G, full_matrices=False)
    w = _mask(s, tuple(G.shape[-2:])).to(G.dtype)
    return (u * w.unsqueeze(-2)) @ vh


def _polar(G: Tensor, method: str, dtype: torch.dtype | None = None) -> Tensor:
    route = resolve_polar(method, G)
    if route == "svd":
        return masked_polar(G)
    if route == "gram":
        # Same cut-off as masked_polar: max(m, n) * eps of G's dtype.
        return gram_polar(G, check_finite=False)
    return msign(G, method=route, dtype=dtype, check_finite=False)


def sv_weights(s: Tensor, norm: object) -> Tensor:
    r"""The weights :math:`h(s)` of the LMO :math:`-U\,\mathrm{diag}(h(s))\,V^\top` for the
    singular values ``s`` (a vector: all blocks' singular values together).

    Example:
        >>> sv_weights(torch.tensor([3.0, 4.0]), "frobenius")
        tensor([0.6000, 0.8000])
    """
    spec = parse_norm(norm)
    if s.numel() == 0 or not bool(s.max() > 0):
        return torch.zeros_like(s)
    if math.isinf(spec.p):
        return _mask(s, (s.numel(), 1)).to(s.dtype)
    if spec.p == 1:
        out = torch.zeros_like(s)
        out[int(torch.argmax(s))] = 1.0
        return out
    q = dual_exponent(spec.p)
    w = s.pow(q - 1.0) / s.pow(q).sum().pow((q - 1.0) / q)
    return torch.where(_mask(s, (s.numel(), 1)), w, torch.zeros_like(s))


def block_norm(blocks: Sequence[Tensor], norm: object) -> Tensor:
    """The Schatten-p norm of ``diag(blocks)`` (the intrinsic norm once lifted)."""
    spec = parse_norm(norm)
    s = torch.cat([torch.linalg.svdvals(b).reshape(-1) for b in blocks])
    if math.isinf(spec.p):
        return s.max()
    return s.pow(spec.p).sum().pow(1.0 / spec.p)


def dual_scale(blocks: Sequence[Tensor], ds: Sequence[Tensor]) -> list[Tensor]:
    r"""``ds`` times the dual norm :math:`N_*(\mathrm{diag}(G_i)) = -\sum_i\langle G_i, D_i\rangle`.

    The LMO gives a unit step; multiplied by the dual norm it becomes the steepest-descent step
    :math:`\mathrm{argmin}_D \langle G, D\rangle + \tfrac12 N(D)^2` (for Frobenius: ``-G``).
    """
    dual = -sum((b * d).sum() for b, d in zip(blocks, ds, strict=True))
    return [d * dual for d in ds]


def _joint_rank_cut(blocks: Sequence[Tensor], ds: list[Tensor]) -> list[Tensor]:
    """Zero the polar factor of a block that is round-off next to the largest block.

    The blocks are one block-diagonal matrix, so one numerical-rank rule applies to all of
    them: a block whose scale is at most ``max(rows, cols) * eps`` times the largest block's is
    zero up to rounding (e.g. the skew block ``X^T G`` of a Stiefel gradient whose exact value is
    0), and its polar factor would be a unit-size step in a direction rounding picked. Each
    block alone cannot see this: its own relative cut keeps its noise. No host sync.
    """
    if len(blocks) < 2:
        return ds
    # the largest entry as each block's scale: unlike a norm it cannot overflow on finite input
    norms = torch.stack([b.abs().amax(dim=(-2, -1)) for b in blocks])
    rows = sum(b.shape[-2] for b in blocks)
    cols = sum(b.shape[-1] for b in blocks)
    eps = max(torch.finfo(b.dtype).eps for b in blocks)
    keep = norms > max(rows, cols) * eps * norms.amax(dim=0)
    return [d * keep[i].to(d.dtype)[..., None, None] for i, d in enumerate(ds)]


def block_lmo(
    blocks: Sequence[Tensor],
    norm: object,
    polar: str = "auto",
    polar_dtype: torch.dtype | None = None,
) -> list[Tensor]:
    r""":math:`\mathrm{argmin}_{N(D) \le 1} \langle \mathrm{diag}(G_i), D\rangle`, block by block.

    Args:
        blocks: matrices ``G_i`` (any shapes, one dtype).
        norm: ``"spectral" | "frobenius" | "nuclear" | ("schatten", p)``.
        polar: polar route for the spectral norm (see :func:`resolve_polar`); other norms use
            the SVD (Frobenius none).
        polar_dtype: Newton-Schulz computation dtype (``None``: shared_core's default,
            bfloat16 on CUDA and float32 elsewhere; ``torch.bfloat16`` matches
            torch.optim.Muon, which is also faster on CPUs with bf16 matrix units).

    Returns:
        The blocks ``D_i`` of the minimiser; all zero when every ``G_i`` is zero.

    Example:
        >>> G = [torch.diag(torch.tensor([3.0, 1.0])), torch.tensor([[2.0]])]
        >>> [d.abs().tolist() for d in block_lmo(G, "nuclear")]
        [[[1.0, 0.0], [0.0, 0.0]], [[0.0]]]
    """
    spec = parse_norm(norm)
    if math.isinf(spec.p):
        return _joint_rank_cut(blocks, [-_polar(b, polar, polar_dtype) for b in blocks])
    if spec.p == 2:
        total = torch.sqrt(sum((b * b).sum() for b in blocks))
        scale = torch.where(total > 0, 1.0 / total, torch.zeros_like(total))
        return [-b * scale for b in blocks]
    svds = [torch.linalg.svd(b, full_matrices=False) for b in blocks]
    s_all = torch.cat([s.reshape(-1) for _, s, _ in svds])
    if spec.p == 1:
        out = [torch.zeros_like(b) for b in blocks]
        if s_all.numel() == 0 or not bool(s_all.max() > 0):
            return out
        k = int(torch.argmax(s_all))
        for i, (u, s, vh) in enumerate(svds):
            if k < s.numel():
                out[i] = -torch.outer(u[:, k], vh[k, :])
                return out
            k -= s.numel()
        return out
    q = dual_exponent(spec.p)
    denom = s_all.pow(q).sum().pow((q - 1.0) / q)
    if not bool(denom > 0):
        return [torch.zeros_like(b) for b in blocks]
    out = []
    for b, (u, s, vh) in zip(blocks, svds, strict=True):
        w = torch.where(_mask(s, tuple(b.shape)), s.pow(q - 1.0) / denom, torch.zeros_like(s))
        out.append(-(u * w.unsqueeze(-2)) @ vh)
    return out
