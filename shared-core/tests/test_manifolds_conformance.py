"""The conformance suite: one set of checks that every manifold of shared_core.manifolds passes.

Points of quotient and factored manifolds are tuples, so the helpers below treat points and
vectors as trees of tensors. "Ambient form" means the coordinates in which a manifold sits in
a vector space: the point itself for tensor manifolds and for FixedRankFactored (the pair
(A, B) lives in R^{m x r} x R^{n x r}), the dense matrix U S V^T for FixedRankEmbedded.

What "proju is self-adjoint" means here: each manifold's `inner` is an inner product on the
whole ambient space that restricts to the metric on tangent vectors (Frobenius; for Stiefel
with the canonical metric tr(U^T (I - XX^T/2) V); for SPD tr(X^-1 U^T X^-1 V) or
<Dlog U, Dlog V>; for FixedRankFactored the weighted metric g itself, which is positive
definite on all pairs). `proju` is claimed to be the orthogonal projection onto the
(horizontal) tangent space for that inner product, which is exactly: proju is idempotent,
inner(x, P a, b) == inner(x, a, P b) for all ambient a, b, and a - P a is inner-orthogonal to
every tangent vector. All three are tested for every manifold.
"""

from __future__ import annotations

import re

import pytest
import torch

from shared_core.manifolds import (
    SPD,
    Euclidean,
    FixedRankEmbedded,
    FixedRankFactored,
    Grassmann,
    Manifold,
    NoClosedFormError,
    Product,
    Segre,
    Sphere,
    Stiefel,
    UnsupportedDtypeError,
)

F64 = torch.float64

CASES: dict[str, Manifold] = {
    "euclidean": Euclidean(4, 3),
    "sphere-vector": Sphere(7),
    "sphere-matrix": Sphere(3, 4),
    "stiefel-euclidean-qr": Stiefel(7, 3),
    "stiefel-euclidean-polar": Stiefel(7, 3, retraction="polar"),
    "stiefel-canonical-qr": Stiefel(7, 3, metric="canonical"),
    "stiefel-canonical-polar-square": Stiefel(4, 4, metric="canonical", retraction="polar"),
    "grassmann-polar": Grassmann(7, 3),
    "grassmann-qr": Grassmann(7, 3, retraction="qr"),
    "spd-affine": SPD(5),
    "spd-affine-expretr": SPD(4, retraction="expmap"),
    "spd-logeuclidean": SPD(5, metric="log_euclidean"),
    "spd-logeuclidean-expretr": SPD(4, metric="log_euclidean", retraction="expmap"),
    "fixedrank-factored": FixedRankFactored(9, 6, 2),
    "fixedrank-embedded": FixedRankEmbedded(9, 6, 2),
    "fixedrank-embedded-2r-exceeds-n": FixedRankEmbedded(5, 4, 3),
    "product": Product(Sphere(5), Stiefel(6, 2, metric="canonical"), FixedRankFactored(5, 4, 2)),
    "segre-hosvd": Segre((4, 3, 5)),
    "segre-factor-order4": Segre((3, 2, 4, 2), retraction="factor"),
    "segre-matrix": Segre((5, 3)),
    "product-nested": Product(
        Euclidean(3), Product(SPD(3), Grassmann(5, 2)), FixedRankEmbedded(4, 5, 2)
    ),
}

manifolds = pytest.mark.parametrize("M", list(CASES.values()), ids=list(CASES))


# ---------------------------------------------------------------------------- tree helpers
def tmap(fn, *trees):
    head = trees[0]
    if isinstance(head, tuple):
        items = [tmap(fn, *parts) for parts in zip(*trees, strict=True)]
        return type(head)(*items) if hasattr(head, "_fields") else tuple(items)
    return fn(*trees)


def leaves(tree) -> list[torch.Tensor]:
    if isinstance(tree, tuple):
        return [leaf for item in tree for leaf in leaves(item)]
    return [tree]


def tdot(a, b) -> torch.Tensor:
    return sum((x * y).sum() for x, y in zip(leaves(a), leaves(b), strict=True))


def tnorm(a) -> float:
    return float(tdot(a, a).sqrt())


def tsub(a, b):
    return tmap(lambda x, y: x - y, a, b)


def tscale(a, s: float):
    return tmap(lambda x: s * x, a)


def flatten(tree) -> torch.Tensor:
    return torch.cat([leaf.reshape(-1) for leaf in leaves(tree)])


def unflatten(vec: torch.Tensor, template):
    out, pos = [], 0
    for leaf in leaves(template):
        out.append(vec[pos : pos + leaf.numel()].reshape(leaf.shape))
        pos += leaf.numel()
    it = iter(out)
    return tmap(lambda _: next(it), template)


def assert_tree_close(a, b, atol: float, rtol: float = 0.0) -> None:
    for x, y in zip(leaves(a), leaves(b), strict=True):
        torch.testing.assert_close(x, y, atol=atol, rtol=rtol)


def index(tree, idx):
    return tmap(lambda t: t[idx], tree)


def gauss(shape, gen, dtype=F64) -> torch.Tensor:
    return torch.randn(tuple(shape), generator=gen, dtype=dtype)


# ---------------------------------------------------------------------------- ambient forms
def amb_point(M: Manifold, x):
    if isinstance(M, Product):
        return tuple(amb_point(c, xi) for c, xi in zip(M.manifolds, x, strict=True))
    if isinstance(M, FixedRankEmbedded | Segre):
        return M.to_dense(x)
    return x


def amb_tangent(M: Manifold, x, u):
    if isinstance(M, Product):
        return tuple(amb_tangent(c, xi, ui) for c, xi, ui in zip(M.manifolds, x, u, strict=True))
    if isinstance(M, FixedRankEmbedded | Segre):
        return M.tangent_to_dense(x, u)
    return u


def random_ambient(M: Manifold, x, gen):
    """A Gaussian ambient vector in the form `proju` accepts."""
    if isinstance(M, Product):
        return tuple(random_ambient(c, xi, gen) for c, xi in zip(M.manifolds, x, strict=True))
    if isinstance(M, FixedRankEmbedded):
        return gauss((*M.batch_shape(x), M.m, M.n), gen, x[0].dtype)
    if isinstance(M, Segre):
        return gauss((*M.batch_shape(x), *M.dims), gen, x[0].dtype)
    return tmap(lambda t: gauss(t.shape, gen, t.dtype), x)


def off_tangent(M: Manifold, x, u, gen):
    """``u`` plus a component normal to the (horizontal) tangent space; None if none exists."""
    if isinstance(M, Product):
        for i, (c, xi, ui) in enumerate(zip(M.manifolds, x, u, strict=True)):
            bad = off_tangent(c, xi, ui, gen)
            if bad is not None:
                return (*u[:i], bad, *u[i + 1 :])
        return None
    if isinstance(M, Euclidean):
        return None
    if isinstance(M, Sphere):
        return u + 0.5 * x
    if isinstance(M, Stiefel):
        s = gauss((M.p, M.p), gen)
        return u + 0.5 * x @ (s + s.mT)
    if isinstance(M, Grassmann):
        return u + 0.5 * x @ gauss((M.p, M.p), gen)  # vertical and normal parts both
    if isinstance(M, SPD):
        k = gauss((M.n, M.n), gen)
        return u + 0.5 * (k - k.mT)
    if isinstance(M, FixedRankFactored):
        k = gauss((M.r, M.r), gen)
        return type(u)(u.A + x.A @ k, u.B - x.B @ k.mT)  # a vertical vector
    if isinstance(M, FixedRankEmbedded):
        return type(u)(u.M, u.Up + x.U @ gauss((M.r, M.r), gen), u.Vp)
    if isinstance(M, Segre):  # a component of w_0 along u_0
        return type(u)(u.scale, (u.vecs[0] + 0.5 * x.factors[0], *u.vecs[1:]))
    raise AssertionError(f"no off-tangent recipe for {M!r}")


def has_expmap(M: Manifold) -> bool:
    if isinstance(M, Product):
        return all(has_expmap(c) for c in M.manifolds)
    return not isinstance(M, FixedRankFactored | FixedRankEmbedded)


def has_logmap(M: Manifold) -> bool:
    if isinstance(M, Product):
        return all(has_logmap(c) for c in M.manifolds)
    return isinstance(M, Euclidean | Sphere | Grassmann | SPD | Segre)


def objective(ambient_point, gen):
    """A smooth non-quadratic f on the ambient form, its coefficients drawn from ``gen``."""
    coeffs = [
        (gauss(t.shape, gen), gauss(t.shape, gen), gauss(t.shape, gen))
        for t in leaves(ambient_point)
    ]

    def f(tree):
        total = 0.0
        for t, (c, d, e) in zip(leaves(tree), coeffs, strict=True):
            total = total + (c * t).sum() + 0.5 * (d * t**2).sum() + 0.1 * (e * t**3).sum()
        return total

    return f


def euclidean_gradient(f, ambient_point):
    tree = tmap(lambda t: t.detach().clone().requires_grad_(True), ambient_point)
    grads = torch.autograd.grad(f(tree), leaves(tree))
    it = iter(grads)
    return tmap(lambda _: next(it), ambient_point)


def unit_tangent(M, x, gen):
    u = M.random_tangent(x, generator=gen)
    return tscale(u, 1.0 / float(M.norm(x, u)))


# ---------------------------------------------------------------------------- points, vectors
@manifolds
def test_random_point_is_a_point(M, gen):
    x = M.random_point(generator=gen, dtype=F64)
    M.check_point(x)
    assert M.is_point(x)
    xb = M.random_point(2, 3, generator=gen, dtype=F64)
    M.check_point(xb)
    assert tuple(M.batch_shape(xb)) == (2, 3)


@manifolds
def test_random_tangent_is_tangent(M, gen):
    x = M.random_point(2, generator=gen, dtype=F64)
    u = M.random_tangent(x, generator=gen)
    M.check_tangent(x, u)
    assert M.is_tangent(x, u)
    assert bool((M.norm(x, u) > 0).all())
    z = M.zero_tangent(x)
    M.check_tangent(x, z)
    assert bool((M.norm(x, z) == 0).all())


@manifolds
def test_proju_is_idempotent_and_lands_in_tangent_space(M, gen):
    x = M.random_point(3, generator=gen, dtype=F64)
    a = random_ambient(M, x, gen)
    pa = M.proju(x, a)
    M.check_tangent(x, pa)
    assert_tree_close(M.proju(x, pa), pa, atol=1e-12)


@manifolds
def test_proju_is_orthogonal_for_the_metric(M, gen):
    x = M.random_point(3, generator=gen, dtype=F64)
    a, b = random_ambient(M, x, gen), random_ambient(M, x, gen)
    pa, pb = M.proju(x, a), M.proju(x, b)
    scale = M.norm(x, a) * M.norm(x, b)
    torch.testing.assert_close(M.inner(x, pa, b) / scale, M.inner(x, a, pb) / scale)
    residual = tsub(a, amb_tangent(M, x, pa))
    t = M.random_tangent(x, generator=gen)
    ortho = M.inner(x, residual, t) / (M.norm(x, a) * M.norm(x, t))
    assert float(ortho.abs().max()) < 1e-10
    # The residual is not itself tangent (a Gaussian has a normal part) unless the space is flat.
    if not isinstance(M, Euclidean):
        assert float(M.norm(x, residual).min()) > 1e-3


@manifolds
def test_dim_is_the_rank_of_proju(M, gen):
    x = M.random_point(generator=gen, dtype=F64)
    template = random_ambient(M, x, gen)
    size = flatten(template).numel()
    cols = [
        flatten(amb_tangent(M, x, M.proju(x, unflatten(e, template))))
        for e in torch.eye(size, dtype=F64)
    ]
    P = torch.stack(cols, dim=1)
    assert int(torch.linalg.matrix_rank(P)) == M.dim
    torch.testing.assert_close(P @ P, P, atol=1e-11, rtol=0)


@manifolds
def test_inner_is_symmetric_positive_and_matches_norm(M, gen):
    x = M.random_point(4, generator=gen, dtype=F64)
    u, v = M.random_tangent(x, generator=gen), M.random_tangent(x, generator=gen)
    torch.testing.assert_close(M.inner(x, u, v), M.inner(x, v, u))
    assert M.inner(x, u).shape == (4,)
    assert bool((M.inner(x, u) > 0).all())
    torch.testing.assert_close(M.norm(x, u) ** 2, M.inner(x, u, u))
    torch.testing.assert_close(M.norm(x, tscale(u, -3.0)), 3.0 * M.norm(x, u))


# ---------------------------------------------------------------------------- gradients
@manifolds
def test_egrad2rgrad_is_the_riesz_representer(M, gen):
    # <rgrad, u>_x equals the Euclidean differential <egrad, u> for every tangent u.
    x = M.random_point(generator=gen, dtype=F64)
    f = objective(amb_point(M, x), gen)
    egrad = euclidean_gradient(f, amb_point(M, x))
    rgrad = M.egrad2rgrad(x, egrad)
    M.check_tangent(x, rgrad)
    assert_tree_close(M.egrad_to_rgrad(x, egrad), rgrad, atol=0)
    for _ in range(3):
        u = M.random_tangent(x, generator=gen)
        lhs = M.inner(x, rgrad, u)
        rhs = tdot(egrad, amb_tangent(M, x, u))
        assert abs(float(lhs - rhs)) <= 1e-10 * (1 + tnorm(egrad) * tnorm(amb_tangent(M, x, u)))


@manifolds
def test_egrad2rgrad_matches_finite_differences(M, gen):
    # Central differences of t -> f(retr(x, t u)) (a smooth curve with velocity u at 0).
    x = M.random_point(generator=gen, dtype=F64)
    f = objective(amb_point(M, x), gen)
    rgrad = M.egrad2rgrad(x, euclidean_gradient(f, amb_point(M, x)))
    h = 1e-5
    for _ in range(3):
        u = unit_tangent(M, x, gen)
        fd = (
            f(amb_point(M, M.retr(x, tscale(u, h)))) - f(amb_point(M, M.retr(x, tscale(u, -h))))
        ) / (2 * h)
        exact = M.inner(x, rgrad, u)
        assert abs(float(fd - exact)) <= 1e-6 * (1 + abs(float(exact)))


# ---------------------------------------------------------------------------- retraction
@manifolds
def test_retr_stays_on_the_manifold(M, gen):
    x = M.random_point(3, generator=gen, dtype=F64)
    u = M.random_tangent(x, generator=gen)
    for s in (1e-3, 0.3, 1.0, 3.0):
        M.check_point(M.retr(x, tscale(u, s)))
    assert_tree_close(M.retract(x, u), M.retr(x, u), atol=0)


@manifolds
def test_retr_of_zero_is_the_point(M, gen):
    x = M.random_point(2, generator=gen, dtype=F64)
    assert_tree_close(amb_point(M, M.retr(x, M.zero_tangent(x))), amb_point(M, x), atol=1e-12)


@manifolds
def test_retr_is_first_order(M, gen):
    # retr(x, t u) = x + t u + O(t^2): the error must fall at least ~4x each time t halves.
    x = M.random_point(generator=gen, dtype=F64)
    u = unit_tangent(M, x, gen)
    x0, du = amb_point(M, x), amb_tangent(M, x, u)
    errs = []
    for k in range(4):
        t = 0.05 / 2**k
        step = tmap(lambda a, b, t=t: a + t * b, x0, du)
        errs.append(tnorm(tsub(amb_point(M, M.retr(x, tscale(u, t))), step)))
    if max(errs) < 1e-13:  # the retraction is exactly x + t u (Euclidean, factored)
        return
    ratios = [errs[k] / errs[k + 1] for k in range(3)]
    assert min(ratios) > 3.5, (errs, ratios)
    assert errs[0] < 0.05  # and the O(t^2) constant is sane (t = 0.05, |u| = 1)


@manifolds
def test_expmap_agrees_with_retr_and_lands_on_the_manifold(M, gen):
    x = M.random_point(2, generator=gen, dtype=F64)
    u = M.random_tangent(x, generator=gen)
    if not has_expmap(M):
        with pytest.raises(NoClosedFormError, match="retr"):
            M.expmap(x, u)
        return
    for s in (0.5, 2.0):
        M.check_point(M.expmap(x, tscale(u, s)))
    assert_tree_close(amb_point(M, M.expmap(x, M.zero_tangent(x))), amb_point(M, x), atol=1e-12)
    x1, u1 = index(x, 0), unit_tangent(M, index(x, 0), gen)
    errs = [
        tnorm(
            tsub(
                amb_point(M, M.expmap(x1, tscale(u1, t))),
                amb_point(M, M.retr(x1, tscale(u1, t))),
            )
        )
        for t in (0.04, 0.02, 0.01)
    ]
    if max(errs) > 1e-13:
        assert errs[0] / errs[1] > 3.5 and errs[1] / errs[2] > 3.5, errs


@manifolds
def test_geodesic_distance_grows_linearly(M, gen):
    # dist(x, exp_x(t u)) = t |u|_x inside the injectivity radius, and log inverts exp.
    x = M.random_point(generator=gen, dtype=F64)
    if not has_logmap(M):
        with pytest.raises(NoClosedFormError, match="closed-form"):
            M.logmap(x, x)
        with pytest.raises(NoClosedFormError, match="closed-form"):
            M.dist(x, x)
        return
    u = tscale(unit_tangent(M, x, gen), 0.5)
    for t in (0.25, 0.5, 1.0, 2.0):
        y = M.expmap(x, tscale(u, t))
        torch.testing.assert_close(M.dist(x, y), torch.tensor(0.5 * t, dtype=F64))
    y = M.expmap(x, u)
    assert_tree_close(M.logmap(x, y), u, atol=1e-10)
    torch.testing.assert_close(M.dist(x, x), torch.tensor(0.0, dtype=F64), atol=1e-7, rtol=0)


# ---------------------------------------------------------------------------- transport
@manifolds
def test_transp_lands_in_the_destination_tangent_space(M, gen):
    x = M.random_point(3, generator=gen, dtype=F64)
    y = M.retr(x, M.random_tangent(x, generator=gen))
    v = M.random_tangent(x, generator=gen)
    w = M.transp(x, y, v)
    M.check_tangent(y, w)
    assert_tree_close(M.transport(x, y, v), w, atol=0)
    # Transport to the starting point changes nothing.
    assert_tree_close(M.transp(x, x, v), v, atol=1e-10)


# ---------------------------------------------------------------------------- batching, dtypes
@manifolds
def test_batched_operations_match_one_at_a_time(M, gen):
    x = M.random_point(2, 3, generator=gen, dtype=F64)
    u = M.random_tangent(x, generator=gen)
    v = M.random_tangent(x, generator=gen)
    a = random_ambient(M, x, gen)
    y = M.retr(x, u)
    ops = {
        "proju": lambda x, u, v, a, y: M.proju(x, a),
        "retr": lambda x, u, v, a, y: M.retr(x, u),
        "inner": lambda x, u, v, a, y: M.inner(x, u, v),
        "egrad2rgrad": lambda x, u, v, a, y: M.egrad2rgrad(x, a),
        "transp": lambda x, u, v, a, y: M.transp(x, y, v),
    }
    if has_expmap(M):
        ops["expmap"] = lambda x, u, v, a, y: M.expmap(x, u)
    if has_logmap(M):
        ops["dist"] = lambda x, u, v, a, y: M.dist(x, y)
        ops["logmap"] = lambda x, u, v, a, y: M.logmap(x, y)
    for name, op in ops.items():
        batched = op(x, u, v, a, y)
        for i in range(2):
            for j in range(3):
                one = op(*(index(t, (i, j)) for t in (x, u, v, a, y)))
                assert_tree_close(index(batched, (i, j)), one, atol=1e-11, rtol=1e-9), name


@manifolds
def test_float32_points_and_steps(M, gen):
    x = M.random_point(2, generator=gen, dtype=torch.float32)
    assert all(t.dtype == torch.float32 for t in leaves(x))
    M.check_point(x)
    u = M.random_tangent(x, generator=gen)
    M.check_tangent(x, u)
    y = M.retr(x, tscale(u, 0.1))
    assert all(t.dtype == torch.float32 for t in leaves(y))
    M.check_point(y)
    M.check_tangent(y, M.transp(x, y, u))


@manifolds
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_raises_a_clear_error(M, dtype, gen):
    with pytest.raises(UnsupportedDtypeError, match="float32 or float64"):
        M.random_point(generator=gen, dtype=dtype)
    x = M.random_point(generator=gen, dtype=F64)
    u = M.random_tangent(x, generator=gen)
    half_x, half_u = tmap(lambda t: t.to(dtype), x), tmap(lambda t: t.to(dtype), u)
    with pytest.raises(UnsupportedDtypeError, match=re.escape(str(dtype))):
        M.retr(half_x, half_u)
    with pytest.raises(ValueError, match="float32 or float64"):  # also a ValueError
        M.inner(half_x, half_u)
    with pytest.raises(TypeError):
        M.egrad2rgrad(x, half_u)


# ---------------------------------------------------------------------------- bad input
@manifolds
def test_check_point_rejects_wrong_shapes_and_nan(M, gen):
    x = M.random_point(generator=gen, dtype=F64)
    short = tmap(lambda t: t[..., :-1], x)
    with pytest.raises(ValueError, match="shape"):
        M.check_point(short)
    assert not M.is_point(short)
    first = leaves(x)[0]
    poisoned = first.clone()
    poisoned[(0,) * poisoned.ndim] = float("nan")
    it = iter([poisoned, *leaves(x)[1:]])
    with pytest.raises(ValueError, match="NaN"):
        M.check_point(tmap(lambda _: next(it), x))
    with pytest.raises(ValueError, match="not a point"):
        M.check_point(3.0)


@manifolds
def test_check_tangent_rejects_non_tangent_vectors(M, gen):
    x = M.random_point(2, generator=gen, dtype=F64)
    u = M.random_tangent(x, generator=gen)
    bad = off_tangent(M, x, u, gen)
    if bad is not None:
        with pytest.raises(ValueError, match="exceeds the tolerance"):
            M.check_tangent(x, bad)
        assert not M.is_tangent(x, bad)
        # The projection repairs it.
        M.check_tangent(x, M.proju(x, bad))
    with pytest.raises(ValueError, match="shape"):
        M.check_tangent(x, tmap(lambda t: t[..., :-1], u))
