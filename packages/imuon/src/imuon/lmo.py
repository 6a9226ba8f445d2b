r"""Intrinsic LMOs: :math:`\xi^\star = L_x^{-1}\,\mathrm{LMO}_N(L_x\,\Gamma)` per manifold.

For a Riemannian metric :math:`g_x` and a linear isometry :math:`L_x` from
:math:`(T_xM, g_x)` onto a subspace :math:`\mathcal{S}_x` of a matrix space with the Frobenius
inner product, the intrinsic norm is :math:`\|\xi\|_x = N(L_x\xi)` and the intrinsic LMO at the
Riemannian gradient (or momentum) :math:`\Gamma` is

.. math::

    \xi^\star = \operatorname*{argmin}_{\xi \in T_xM,\ N(L_x\xi) \le 1} g_x(\Gamma, \xi)
    = \operatorname*{argmin}_{D \in \mathcal{S}_x,\ N(D) \le 1} \langle L_x\Gamma, D\rangle_F .

When :math:`\mathcal{S}_x` is closed under :math:`\mathrm{LMO}_N`, the ambient LMO of
:math:`L_x\Gamma` lies in :math:`\mathcal{S}_x` and so solves the restricted problem too:
:math:`\xi^\star = L_x^{-1}\mathrm{LMO}_N(L_x\Gamma)`. Each lift below maps into block-diagonal
matrices whose blocks are either unconstrained, skew, symmetric, or have a prescribed column
space, and each such family is closed under the LMO of :mod:`imuon.norms`.

All functions take a tangent vector ``rgrad`` (the Riemannian gradient or a momentum buffer) and
return the unit-norm minimiser (radius 1); multiply by the learning rate outside.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from shared_core.manifolds import Factors

from .norms import block_lmo, block_norm, dual_scale, sv_weights

__all__ = [
    "balance_error",
    "balanced_gauge",
    "cholesky_qr64",
    "euclidean_lmo",
    "fixed_rank_lift",
    "fixed_rank_lmo",
    "fixed_rank_lmo_of_blocks",
    "fixed_rank_proju",
    "fixed_rank_rgrad",
    "grassmann_lmo",
    "horizontal_part",
    "horizontal_split",
    "intrinsic_norm",
    "rsolve_triangular",
    "spd_lift",
    "spd_lmo",
    "stiefel_lift",
    "stiefel_lmo",
    "triangular_inverse",
    "use_inverse",
]

_SQRT2 = math.sqrt(2.0)


def _skew(a: Tensor) -> Tensor:
    return 0.5 * (a - a.mT)


def _sym(a: Tensor) -> Tensor:
    return 0.5 * (a + a.mT)


# ---------------------------------------------------------------- Euclidean
def euclidean_lmo(
    G: Tensor, norm: object = "spectral", polar: str = "auto", dual: bool = False, polar_dtype=None
) -> Tensor:
    """Plain Muon-family LMO ``argmin_{N(D) <= 1} <G, D>`` (identity lift).

    Example:
        >>> euclidean_lmo(torch.tensor([[2.0, 0.0], [0.0, -3.0]])).diagonal()
        tensor([-1.,  1.])
    """
    ds = block_lmo([G], norm, polar, polar_dtype)
    return (dual_scale([G], ds) if dual else ds)[0]


# ---------------------------------------------------------------- Stiefel
def _stiefel_scale(metric: str) -> float:
    if metric == "euclidean":
        return 1.0
    if metric == "canonical":
        return 1.0 / _SQRT2
    raise ValueError(f"unknown Stiefel metric {metric!r}; use 'euclidean' or 'canonical'")


def stiefel_lift(X: Tensor, xi: Tensor, metric: str = "euclidean") -> list[Tensor]:
    r"""Blocks of :math:`L_X\xi = \mathrm{diag}(c\,X^\top\xi,\ (I - XX^\top)\xi)`.

    With :math:`\xi = XA + X_\perp B` (:math:`A` skew), the embedded metric is
    :math:`\|A\|_F^2 + \|B\|_F^2` (:math:`c = 1`) and the canonical one
    :math:`\tfrac12\|A\|_F^2 + \|B\|_F^2` (:math:`c = 1/\sqrt2`); :math:`(I - XX^\top)\xi =
    X_\perp B` has the singular values of :math:`B`, so no basis :math:`X_\perp` is needed.
    """
    c = _stiefel_scale(metric)
    a = X.mT @ xi
    return [c * a, xi - X @ a]


def stiefel_lmo(
    X: Tensor,
    rgrad: Tensor,
    norm: object = "spectral",
    metric: str = "euclidean",
    polar: str = "auto",
    dual: bool = False,
    polar_dtype=None,
) -> Tensor:
    r"""Intrinsic LMO on Stiefel :math:`\{X : X^\top X = I_p\}`.

    .. math::

        \xi^\star = \tfrac1c X D_1 + D_2,\qquad
        (D_1, D_2) = \mathrm{LMO}_N\big(\mathrm{diag}(c\,X^\top\Gamma,\ (I - XX^\top)\Gamma)\big).

    :math:`D_1` is skew (the LMO of a skew, hence normal, matrix is an odd function of it) and
    :math:`D_2` keeps the column space of :math:`(I - XX^\top)\Gamma`, so :math:`\xi^\star` is
    tangent. Spectral, Euclidean metric:
    :math:`\xi^\star = -X\,\mathrm{msign}(X^\top\Gamma) - \mathrm{msign}((I - XX^\top)\Gamma)`.

    Args:
        X: ``(n, p)`` orthonormal frame.
        rgrad: tangent vector at ``X`` (the Riemannian gradient for ``metric``).
        norm: unitarily invariant norm (see :func:`imuon.norms.parse_norm`).
        metric: ``"euclidean"`` or ``"canonical"`` (must match the metric of ``rgrad``).
        polar: polar route for the spectral norm.
        dual: multiply by the dual norm :math:`N_*(L_X\Gamma)` (steepest descent instead of
            the unit LMO step; the same flag exists on every LMO of this module).

    Returns:
        The tangent direction with intrinsic norm 1 (0 for a zero ``rgrad``).

    Example:
        >>> from shared_core.manifolds import Stiefel
        >>> St = Stiefel(6, 3)
        >>> X = St.random_point(generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        >>> xi = stiefel_lmo(X, St.egrad2rgrad(X, torch.ones(6, 3, dtype=torch.float64)))
        >>> St.is_tangent(X, xi)
        True
    """
    c = _stiefel_scale(metric)
    blocks = stiefel_lift(X, rgrad, metric)
    ds = block_lmo(blocks, norm, polar, polar_dtype)
    d1, d2 = dual_scale(blocks, ds) if dual else ds
    d1 = _skew(d1)
    d2 = d2 - X @ (X.mT @ d2)  # exact in exact arithmetic; removes round-off
    return X @ d1 / c + d2


# ---------------------------------------------------------------- Grassmann
def grassmann_lmo(
    X: Tensor,
    rgrad: Tensor,
    norm: object = "spectral",
    polar: str = "auto",
    dual: bool = False,
    polar_dtype=None,
) -> Tensor:
    r"""Intrinsic LMO on Grassmann (horizontal lifts :math:`X^\top\xi = 0`, Frobenius metric).

    :math:`L_X` is the identity on horizontal lifts; their set (column space orthogonal to
    :math:`X`) is closed under the LMO, so :math:`\xi^\star = \mathrm{LMO}_N(\Gamma)`. A change
    of basis :math:`X \to XQ` sends :math:`\Gamma \to \Gamma Q` and :math:`\xi^\star \to
    \xi^\star Q`: the step does not depend on the basis.

    Example:
        >>> from shared_core.manifolds import Grassmann
        >>> Gr = Grassmann(6, 2)
        >>> X = Gr.random_point(generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        >>> xi = grassmann_lmo(X, Gr.egrad2rgrad(X, torch.ones(6, 2, dtype=torch.float64)))
        >>> bool((X.mT @ xi).abs().max() < 1e-12)
        True
    """
    ds = block_lmo([rgrad], norm, polar, polar_dtype)
    d = (dual_scale([rgrad], ds) if dual else ds)[0]
    return d - X @ (X.mT @ d)


# ---------------------------------------------------------------- SPD
def _spd_roots(X: Tensor) -> tuple[Tensor, Tensor]:
    w, q = torch.linalg.eigh(_sym(X))
    r = w.sqrt()
    return (q * r.unsqueeze(-2)) @ q.mT, (q / r.unsqueeze(-2)) @ q.mT


def spd_lift(X: Tensor, xi: Tensor) -> Tensor:
    r""":math:`L_X\xi = X^{-1/2}\xi X^{-1/2}` (affine-invariant metric onto Sym(n), Frobenius)."""
    _, isq = _spd_roots(X)
    return isq @ xi @ isq


def _sym_lmo(S: Tensor, norm: object) -> Tensor:
    # For symmetric S = Q diag(l) Q^T the singular values are |l| and the LMO is
    # -Q diag(sign(l) h(|l|)) Q^T: symmetric, so Sym(n) is closed under the LMO.
    w, q = torch.linalg.eigh(_sym(S))
    h = sv_weights(w.abs(), norm)
    return -(q * (torch.sign(w) * h).unsqueeze(-2)) @ q.mT


def spd_lmo(X: Tensor, rgrad: Tensor, norm: object = "spectral", dual: bool = False) -> Tensor:
    r"""Intrinsic LMO on SPD(n) with the affine-invariant metric.

    .. math:: \xi^\star = X^{1/2}\,\mathrm{LMO}_N(X^{-1/2}\Gamma X^{-1/2})\,X^{1/2}.

    With :math:`\Gamma = X\,\mathrm{sym}(G)\,X`, :math:`L_X\Gamma = X^{1/2}\mathrm{sym}(G)X^{1/2}`;
    spectral: :math:`\xi^\star = -X^{1/2}\,\mathrm{sign}(X^{1/2}\mathrm{sym}(G)X^{1/2})\,X^{1/2}`.

    Example:
        >>> X = torch.diag(torch.tensor([4.0, 1.0], dtype=torch.float64))
        >>> spd_lmo(X, torch.diag(torch.tensor([2.0, -3.0], dtype=torch.float64))).diagonal()
        tensor([-4.,  1.], dtype=torch.float64)
    """
    sq, isq = _spd_roots(X)
    s = isq @ rgrad @ isq
    d = _sym_lmo(s, norm)
    if dual:
        d = dual_scale([s], [d])[0]
    return _sym(sq @ d @ sq)


# ---------------------------------------------------------------- fixed rank
def fixed_rank_frames(x) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Thin QRs ``(Q_A, R_A, Q_B, R_B)`` of the factors (pass as ``frames=`` to reuse)."""
    return _frames(x)


def _frames(x) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    qa, ra = torch.linalg.qr(x[0])
    qb, rb = torch.linalg.qr(x[1])
    return qa, ra, qb, rb


# One Cholesky-QR pass in unit round-off u (Gram matrix, Cholesky, triangular solve) gives
# ||Q^T Q - I||_2 <= (5/64) delta^2 with delta = 8 kappa(A) sqrt(m r u + r (r + 1) u), provided
# delta <= 1 (Yamamoto, Nakatsukasa, Yanagisawa, Fukaya, "Roundoff error analysis of the
# CholeskyQR2 algorithm", ETNA 44, 2015). In float64 this is below float32's unit round-off
# 2^-24 for kappa(A) <= ~10 at 4096 x 64 and <= ~28 at 4096 x 8 (kappa taken twice as large).
_CHOLQR_TARGET = 2.0**-24


def cholesky_qr64(a: Tensor) -> tuple[Tensor, Tensor] | None:
    r"""Thin QR of a float32 ``(m, r)`` factor by one float64 Cholesky-QR pass, when certified.

    The Gram matrix, its Cholesky factor and the solve :math:`Q = AR^{-1}` are taken in
    float64 and rounded to float32. The result is returned only when the a-priori bound above,
    evaluated with :math:`\kappa_2(A)` from the eigenvalues of the float64 Gram matrix (times 2
    for the Gram matrix's own round-off, relative :math:`\le m u \kappa^2`), puts the float64
    orthogonality error below float32's unit round-off (at 4096x64: cond(A) <= ~10); otherwise
    (worse-conditioned or rank-deficient factors, a failed Cholesky) ``None``.

    Not used by the optimizer: measured interleaved with ``torch.linalg.qr`` on one CPU thread
    (4096 x r, float32) it is 1.7x (r = 8), 1.3x (r = 32) and 1.2x (r = 64) slower, the float64
    Gram product, ``eigvalsh`` and the synchronising checks outweighing Householder's float32
    flops. Kept, with its tests, as the certified route should another device change that.
    """
    m, r = a.shape[-2:]
    if a.ndim != 2 or r == 0 or m < r:
        return None
    x = a.to(torch.float64)
    gram = x.mT @ x
    R, info = torch.linalg.cholesky_ex(gram, upper=True)
    if int(info) != 0:
        return None
    lam = torch.linalg.eigvalsh(gram)
    if not bool(lam[0] > 0):
        return None
    kappa = 2.0 * math.sqrt(float(lam[-1] / lam[0]))
    u = 2.0**-53
    delta = 8.0 * kappa * math.sqrt(m * r * u + r * (r + 1) * u)
    if not (math.isfinite(delta) and delta <= 1.0 and 5.0 / 64.0 * delta**2 <= _CHOLQR_TARGET):
        return None
    q = rsolve_triangular(R, x, upper=True)
    return q.to(a.dtype), R.to(a.dtype)


def balanced_gauge(a: Tensor, b: Tensor, *tangents: Tensor) -> tuple[Tensor, ...]:
    r"""The balanced factors of :math:`X = AB^\top` and tangent vectors moved alike.

    With thin QRs :math:`A = Q_AR_A`, :math:`B = Q_BR_B` and the SVD
    :math:`R_AR_B^\top = U\Sigma V^\top`, the gauge :math:`M = R_A^{-1}U\Sigma^{1/2}` gives
    :math:`A M = Q_AU\Sigma^{1/2}` and :math:`BM^{-\top} = Q_BV\Sigma^{1/2}`: the same product,
    equal Gram matrices :math:`\Sigma` (each factor conditioned like :math:`\sqrt{\kappa(X)}`,
    the least any factorisation allows). The factors are formed from the orthonormal frames,
    never through :math:`M`, so they are accurate however unbalanced the input. Tangent pairs
    ``(xi_A, xi_B)`` (e.g. a momentum buffer) transform covariantly:
    :math:`(\xi_AM,\ \xi_BM^{-\top})` with :math:`M^{-\top} = R_B^{-1}V\Sigma^{1/2}`; the
    intrinsic step is gauge-covariant, so the product's trajectory is unchanged (to rounding).
    Computed in float64, returned in the inputs' dtype.

    Args:
        a, b: factors ``(m, r)``, ``(n, r)``.
        tangents: any number of ``(xi_A, xi_B)`` pairs, flattened.

    Returns:
        ``(A M, B M^-T, xi_A M, xi_B M^-T, ...)``.
    """
    if len(tangents) % 2:
        raise ValueError("tangents come in (xi_A, xi_B) pairs")
    d = torch.float64
    qa, ra = torch.linalg.qr(a.to(d))
    qb, rb = torch.linalg.qr(b.to(d))
    u, s, vh = torch.linalg.svd(ra @ rb.mT)
    root = s.sqrt()
    us, vs = u * root, vh.mT * root
    out = [(qa @ us).to(a.dtype), (qb @ vs).to(b.dtype)]
    for xa, xb in zip(tangents[0::2], tangents[1::2], strict=True):
        ma = torch.linalg.solve_triangular(ra, xa.to(d), upper=True, left=False) @ us
        mb = torch.linalg.solve_triangular(rb, xb.to(d), upper=True, left=False) @ vs
        out += [ma.to(xa.dtype), mb.to(xb.dtype)]
    return tuple(out)


def balance_error(a: Tensor, b: Tensor) -> float:
    r""":math:`\|A^\top A - B^\top B\|_F / \|A^\top A + B^\top B\|_F` in [0, 1]: 0 for balanced
    factors, near 1 when one factor holds the product's scale."""
    ga, gb = a.double().mT @ a.double(), b.double().mT @ b.double()
    return float((ga - gb).norm() / (ga + gb).norm())


def triangular_inverse(r: Tensor, upper: bool = True) -> Tensor:
    """``r^{-1}`` of a small (r x r) triangular factor, computed in float64, in ``r``'s dtype.

    For a tall block ``x`` (m x r, m >> r), ``x @ r^{-1}`` is one GEMM, which every BLAS runs
    near its peak, where ``solve_triangular`` (TRSM) is tuned very unevenly across machines:
    at 4096 x 64, 0.24 against 0.30 ms on this session's Xeon, but 1.9x slower than the GEMM
    on an AMD EPYC with MKL (issue 34, ~14 ms of the fixed-rank step there). The inverse costs
    r^3/3 flops, negligible next to the m r^2 of the product, and is taken in float64, so the
    float32 route is *more* accurate than a float32 solve (forward error ~eps32 times a modest
    constant against ~1e-7..4e-7 for the solve at cond(R) up to 1e6; tested).
    """
    eye = torch.eye(r.shape[-1], dtype=torch.float64, device=r.device)
    inv = torch.linalg.solve_triangular(r.to(torch.float64), eye, upper=upper)
    return inv.to(r.dtype)


def use_inverse(rows: int, rank: int) -> bool:
    """The route of :func:`rsolve_triangular`: multiply by the inverse for tall blocks
    (``rows >= 2 rank``: the inverse's r^3/3 flops are at most 1/6 of the product's), else
    solve. A rule of shape only, so every rank of a distributed job takes the same route."""
    return rows >= 2 * rank


def rsolve_triangular(
    r: Tensor, x: Tensor, upper: bool, out: Tensor | None = None, inverse: Tensor | None = None
) -> Tensor:
    """``x r^{-1}`` for triangular ``r`` (``solve_triangular(..., left=False)``), row-major.

    Tall ``x`` (:func:`use_inverse`) takes ``x @ r^{-1}`` with the inverse from
    :func:`triangular_inverse` (pass ``inverse=`` to reuse one), others a triangular solve.
    The result goes to a row-major ``out`` (a fresh one by default): torch's solve otherwise
    returns a column-major result, which costs ~1.4x as much at 4096x64 on a CPU and makes
    the element-wise work that follows mix layouts.
    """
    if out is None:
        out = torch.empty(x.shape, dtype=torch.result_type(r, x), device=x.device)
    if inverse is not None or use_inverse(x.shape[-2], r.shape[-1]):
        inv = inverse if inverse is not None else triangular_inverse(r, upper)
        return torch.matmul(x, inv.to(out.dtype), out=out)
    return torch.linalg.solve_triangular(r, x, upper=upper, left=False, out=out)


def fixed_rank_lift(x, xi, lift: str = "horizontal", frames=None) -> list[Tensor]:
    r"""Blocks of :math:`L_x\xi` for :math:`X = AB^\top` with the GL(r)-invariant metric.

    With thin QRs :math:`A = Q_AR_A`, :math:`B = Q_BR_B`, the map
    :math:`(\xi_A, \xi_B) \mapsto (\eta_A, \eta_B) = (\xi_AR_B^\top, \xi_BR_A^\top)` is an
    isometry from :math:`g(\xi, \xi) = \mathrm{tr}(\xi_A B^\top B\xi_A^\top) +
    \mathrm{tr}(\xi_B A^\top A\xi_B^\top)` to the Frobenius norm. ``"horizontal"`` (the quotient
    manifold) splits it further into
    :math:`\mathrm{diag}(\sqrt2 K,\ (I - Q_AQ_A^\top)\eta_A,\ (I - Q_BQ_B^\top)\eta_B)` with
    :math:`K = \tfrac12(Q_A^\top\eta_A + \eta_B^\top Q_B)` (on horizontal vectors both terms
    are equal); ``"total"`` keeps :math:`\mathrm{diag}(\eta_A, \eta_B)` (the factor space).
    """
    qa, ra, qb, rb = frames if frames is not None else _frames(x)
    return _lift_blocks(qa, qb, xi[0] @ rb.mT, xi[1] @ ra.mT, lift)


def horizontal_split(qa: Tensor, qb: Tensor, eta_a: Tensor, eta_b: Tensor):
    r"""Split an L-coordinate pair into ``(K, C_A, C_B)``: :math:`K = \tfrac12(Q_A^\top\eta_A
    + \eta_B^\top Q_B)` and the complements :math:`C_A = (I - Q_AQ_A^\top)\eta_A`,
    :math:`C_B = (I - Q_BQ_B^\top)\eta_B`.

    The horizontal part is :math:`(C_A + Q_AK,\ C_B + Q_BK^\top)` and the horizontal lift is
    :math:`\mathrm{diag}(\sqrt2K, C_A, C_B)`. Both read only the horizontal part of the input:
    ``K`` averages out the vertical :math:`(Q_AJ, -Q_BJ^\top)` and the complements never see
    it, so a pair that is not yet horizontal needs no projection first.
    """
    ka, kb = qa.mT @ eta_a, qb.mT @ eta_b
    k = 0.5 * (ka + kb.mT)
    return k, eta_a - qa @ ka, eta_b - qb @ kb


def _lift_blocks(qa: Tensor, qb: Tensor, eta_a: Tensor, eta_b: Tensor, lift: str) -> list[Tensor]:
    if lift == "total":
        return [eta_a, eta_b]
    if lift != "horizontal":
        raise ValueError(f"unknown fixed-rank lift {lift!r}; use 'horizontal' or 'total'")
    k, ca, cb = horizontal_split(qa, qb, eta_a, eta_b)
    return [_SQRT2 * k, ca, cb]


def fixed_rank_lmo(
    x,
    rgrad,
    norm: object = "spectral",
    lift: str = "horizontal",
    polar="auto",
    dual=False,
    polar_dtype=None,
    frames=None,
):
    r"""Intrinsic LMO on rank-r matrices :math:`AB^\top` (quotient by GL(r)).

    ``"horizontal"`` (default): with :math:`(D_0, D_A, D_B)` the LMO of the lift
    (:func:`fixed_rank_lift`),

    .. math::

        \eta_A = \tfrac{1}{\sqrt2}Q_AD_0 + D_A,\quad \eta_B = \tfrac{1}{\sqrt2}Q_BD_0^\top + D_B,
        \quad \xi_A = \eta_AR_B^{-\top},\quad \xi_B = \eta_BR_A^{-\top}.

    :math:`Q_A^\top\eta_A = D_0/\sqrt2 = \eta_B^\top Q_B`, so the result is horizontal. Under
    the gauge :math:`(AM, BM^{-\top})` the frames rotate (:math:`Q_A \to Q_AO_A`) and every
    block transforms covariantly, so :math:`\xi \to (\xi_AM, \xi_BM^{-\top})` and
    :math:`(A + t\xi_A)(B + t\xi_B)^\top` is the same matrix for every ``M``: only orthonormal
    frames enter, never the factors' conditioning. Spectral induces the ambient step
    :math:`-\sqrt2\,Q_A\mathrm{msign}(Q_A^\top\nabla f Q_B)Q_B^\top
    - \mathrm{msign}(P_A^\perp\nabla f Q_B)Q_B^\top
    - Q_A\mathrm{msign}(P_B^\perp\nabla f^\top Q_A)^\top`.

    ``"total"``: :math:`\xi_A = D_AR_B^{-\top}`, :math:`\xi_B = D_BR_A^{-\top}` for the LMO of
    :math:`\mathrm{diag}(\eta_A, \eta_B)`: the per-block choice
    :math:`\xi_A = -\mathrm{msign}(\nabla f\,\tilde B)\ldots`; gauge-equivariant too, but not
    horizontal (its vertical part moves the factors without moving :math:`AB^\top`).

    Args:
        x: :class:`~shared_core.manifolds.Factors` ``(A, B)``, ``A`` (m, r), ``B`` (n, r).
        rgrad: horizontal tangent pair (e.g. ``FixedRankFactored.egrad2rgrad``).
        norm, polar: see :func:`imuon.norms.block_lmo`.
        lift: ``"horizontal"`` or ``"total"``.

    Returns:
        :class:`~shared_core.manifolds.Factors` ``(xi_A, xi_B)``.

    Example:
        >>> from shared_core.manifolds import FixedRankFactored
        >>> F = FixedRankFactored(5, 4, 2)
        >>> g = torch.Generator().manual_seed(0)
        >>> x = F.random_point(generator=g, dtype=torch.float64)
        >>> G = torch.randn(5, 4, generator=g, dtype=torch.float64)
        >>> xi = fixed_rank_lmo(x, F.egrad2rgrad(x, (G @ x.B, G.mT @ x.A)))
        >>> F.is_tangent(x, xi)
        True
    """
    frames = frames if frames is not None else _frames(x)
    _, ra, _, rb = frames
    blocks = _lift_blocks(frames[0], frames[2], rgrad[0] @ rb.mT, rgrad[1] @ ra.mT, lift)
    return fixed_rank_lmo_of_blocks(frames, blocks, norm, lift, polar, dual, polar_dtype)


def fixed_rank_lmo_of_blocks(
    frames,
    blocks,
    norm: object = "spectral",
    lift: str = "horizontal",
    polar="auto",
    dual=False,
    polar_dtype=None,
    inverses=None,
) -> Factors:
    r""":func:`fixed_rank_lmo` from the lifted blocks: ``[sqrt(2) K, C_A, C_B]`` of
    :func:`horizontal_split` (``"horizontal"``) or the horizontal pair ``[eta_A, eta_B]``
    (``"total"``). The optimizer builds the blocks together with its momentum so that the
    products with the frames are taken once. ``inverses``: ``(R_A^{-1}, R_B^{-1})`` if the
    caller has them (:func:`triangular_inverse`).
    """
    qa, ra, qb, rb = frames
    ds = block_lmo(blocks, norm, polar, polar_dtype)
    if dual:
        ds = dual_scale(blocks, ds)
    if lift == "total":
        eta_a, eta_b = ds
    else:
        d0, da, db = ds
        # eta_A = Q_A D_0 / sqrt(2) + (I - Q_A Q_A^T) D_A: D_A's columns lie outside Q_A in
        # exact arithmetic; the projection removes round-off. One product with each frame:
        # eta_A = D_A + Q_A (D_0 / sqrt(2) - Q_A^T D_A).
        d0 = d0 / _SQRT2
        eta_a = (qa @ (d0 - qa.mT @ da)).add_(da)
        eta_b = (qb @ (d0.mT - qb.mT @ db)).add_(db)
    ia, ib = inverses if inverses is not None else (None, None)
    xi_a = rsolve_triangular(rb.mT, eta_a, upper=False, inverse=None if ib is None else ib.mT)
    xi_b = rsolve_triangular(ra.mT, eta_b, upper=False, inverse=None if ia is None else ia.mT)
    return Factors(xi_a, xi_b)


def horizontal_part(qa: Tensor, qb: Tensor, eta_a: Tensor, eta_b: Tensor):
    r"""Horizontal part of an L-coordinate pair ``(eta_A, eta_B)`` given the frames ``Q_A, Q_B``.

    In L-coordinates the vertical vectors are :math:`(Q_AJ, -Q_BJ^\top)`; removing them (an
    orthogonal projection, the metric being Frobenius there) leaves
    :math:`Q_A^\top\eta_A = \eta_B^\top Q_B = K`, the average of the two.
    """
    k, ca, cb = horizontal_split(qa, qb, eta_a, eta_b)
    return ca + qa @ k, cb + qb @ k.mT


def fixed_rank_rgrad(x, egrad, frames=None) -> Factors:
    r"""Riemannian gradient on the fixed-rank quotient, computed in QR coordinates.

    Equal to ``FixedRankFactored.egrad2rgrad`` (the horizontal part of
    :math:`(G_AB^{\top}B^{-1}\ldots)`) but without Gram matrices: in L-coordinates the Riesz
    representer of :math:`(\nabla_A f, \nabla_B f)` is :math:`(\nabla_A f\,R_B^{-1},
    \nabla_B f\,R_A^{-1})`, so the error grows with :math:`\mathrm{cond}(R)` and not with
    :math:`\mathrm{cond}(R)^2` (which matters for factors of condition number :math:`10^6`).
    """
    qa, ra, qb, rb = frames if frames is not None else _frames(x)
    eta_a = torch.linalg.solve_triangular(rb, egrad[0], upper=True, left=False)
    eta_b = torch.linalg.solve_triangular(ra, egrad[1], upper=True, left=False)
    eta_a, eta_b = horizontal_part(qa, qb, eta_a, eta_b)
    return Factors(
        torch.linalg.solve_triangular(rb.mT, eta_a, upper=False, left=False),
        torch.linalg.solve_triangular(ra.mT, eta_b, upper=False, left=False),
    )


def fixed_rank_proju(x, v, frames=None) -> Factors:
    """Horizontal projection (g-orthogonal) at ``x``, in QR coordinates (see
    :func:`fixed_rank_rgrad`); the vector transport of the fixed-rank momentum."""
    qa, ra, qb, rb = frames if frames is not None else _frames(x)
    eta_a, eta_b = horizontal_part(qa, qb, v[0] @ rb.mT, v[1] @ ra.mT)
    return Factors(
        torch.linalg.solve_triangular(rb.mT, eta_a, upper=False, left=False),
        torch.linalg.solve_triangular(ra.mT, eta_b, upper=False, left=False),
    )


# ---------------------------------------------------------------- norms
def intrinsic_norm(manifold: str, x, xi, norm: object = "spectral", **kw) -> Tensor:
    """``N(L_x xi)`` for ``manifold`` in ``"stiefel" | "grassmann" | "spd" | "fixed_rank" |
    "euclidean"`` (``kw``: ``metric=`` for Stiefel, ``lift=`` for fixed rank)."""
    if manifold == "stiefel":
        blocks = stiefel_lift(x, xi, kw.get("metric", "euclidean"))
    elif manifold in ("grassmann", "euclidean"):
        blocks = [xi]
    elif manifold == "spd":
        blocks = [spd_lift(x, xi)]
    elif manifold == "fixed_rank":
        blocks = fixed_rank_lift(x, xi, kw.get("lift", "horizontal"))
    else:
        raise ValueError(f"unknown manifold {manifold!r}")
    return block_norm(blocks, norm)
