"""Euclidean, Sphere and Product specifics, the shared interface contract, and the docstring
examples of shared_core.manifolds (run as doctests so they cannot rot)."""

from __future__ import annotations

import doctest
import importlib
import math

import numpy as np
import pytest
import torch

from shared_core import manifolds
from shared_core.manifolds import (
    SPD,
    Euclidean,
    FixedRankFactored,
    Grassmann,
    Manifold,
    NoClosedFormError,
    Product,
    Sphere,
    Stiefel,
    UnsupportedDtypeError,
    default_tolerance,
)

F64 = torch.float64


# ---------------------------------------------------------------------------- Sphere
def test_sphere_expmap_is_the_great_circle(gen):
    S = Sphere(6)
    x = S.random_point(generator=gen, dtype=F64)
    u = S.random_tangent(x, generator=gen)
    u = u / u.norm()
    for t in (0.3, 2.0, math.pi):
        torch.testing.assert_close(S.expmap(x, t * u), math.cos(t) * x + math.sin(t) * u)
    torch.testing.assert_close(S.expmap(x, 2 * math.pi * u), x)


def test_sphere_dist_matches_arccos_and_is_accurate_near_zero(gen):
    S = Sphere(3, 4)
    x, y = S.random_point(2, generator=gen, dtype=F64)
    np.testing.assert_allclose(float(S.dist(x, y)), np.arccos(float((x * y).sum())), rtol=1e-12)
    u = S.random_tangent(x, generator=gen)
    u = u / u.norm()
    assert abs(float(S.dist(x, S.expmap(x, 1e-9 * u))) - 1e-9) < 1e-15
    torch.testing.assert_close(S.dist(x, -x), torch.tensor(math.pi, dtype=F64))


def test_sphere_bad_points_and_vectors(gen):
    S = Sphere(5)
    x = S.random_point(generator=gen, dtype=F64)
    with pytest.raises(ValueError, match=r"\| \|\|x\|\|_F - 1 \| = 0\.5"):
        S.check_point(1.5 * x)
    with pytest.raises(ValueError, match="radial part"):
        S.check_tangent(x, x)
    with pytest.raises(ValueError, match="total size 1"):
        Sphere(1, 1)
    with pytest.raises(ValueError, match="at least one dim"):
        Sphere()
    assert Sphere(3, 4).dim == 11


def test_euclidean_is_flat(gen):
    E = Euclidean(2, 3)
    x, y = E.random_point(2, generator=gen, dtype=F64)
    u = E.random_tangent(x, generator=gen)
    torch.testing.assert_close(E.retr(x, u), x + u)
    torch.testing.assert_close(E.expmap(x, u), x + u)
    torch.testing.assert_close(E.logmap(x, y), y - x)
    torch.testing.assert_close(E.dist(x, y), (x - y).norm())
    torch.testing.assert_close(E.transp(x, y, u), u)
    assert E.dim == 6
    with pytest.raises(ValueError, match="at least one dim"):
        Euclidean()
    with pytest.raises(ValueError, match="each dim of shape must be an integer >= 1, got 0"):
        Euclidean(3, 0)


# ---------------------------------------------------------------------------- Product
def test_product_acts_factor_by_factor(gen):
    parts = (Sphere(4), Grassmann(6, 2), SPD(3))
    P = Product(*parts)
    x = P.random_point(3, generator=gen, dtype=F64)
    y = P.random_point(3, generator=gen, dtype=F64)
    u, v = P.random_tangent(x, generator=gen), P.random_tangent(x, generator=gen)
    assert isinstance(x, tuple) and len(x) == 3
    torch.testing.assert_close(
        P.inner(x, u, v), sum(m.inner(a, b, c) for m, a, b, c in zip(parts, x, u, v, strict=True))
    )
    dists = torch.stack([m.dist(a, b) for m, a, b in zip(parts, x, y, strict=True)])
    torch.testing.assert_close(P.dist(x, y), dists.pow(2).sum(0).sqrt())
    for m, got, a, b in zip(parts, P.retr(x, u), x, u, strict=True):
        torch.testing.assert_close(got, m.retr(a, b))
    assert P.dim == 3 + 8 + 6
    assert len(P) == 3
    assert "Grassmann(n=6, p=2" in repr(P)


def test_product_errors_name_the_factor(gen):
    P = Product(Sphere(4), Stiefel(5, 2))
    x = P.random_point(generator=gen, dtype=F64)
    with pytest.raises(ValueError, match=r"factor 1 \(Stiefel.*max \|X\^T X - I\|"):
        P.check_point((x[0], 2 * x[1]))
    with pytest.raises(ValueError, match=r"one entry per factor \(2\); got a tuple of length 1"):
        P.check_point((x[0],))
    with pytest.raises(ValueError, match="batch shapes differ"):
        P.check_point((x[0], x[1].expand(3, 5, 2)))
    with pytest.raises(ValueError, match="factor 0"):
        P.check_tangent(x, (x[0], torch.zeros_like(x[1])))
    with pytest.raises(ValueError, match="at least one manifold"):
        Product()
    with pytest.raises(ValueError, match="factor 1 must be a Manifold"):
        Product(Sphere(3), "Stiefel")
    with pytest.raises(NoClosedFormError, match="FixedRankFactored"):
        Product(Sphere(3), FixedRankFactored(4, 3, 1)).dist(
            *Product(Sphere(3), FixedRankFactored(4, 3, 1)).random_point(2, generator=gen)
        )


def test_product_tolerances_follow_each_factor_dtype(gen):
    P = Product(Sphere(4), Stiefel(5, 2))
    x32 = Sphere(4).random_point(generator=gen, dtype=torch.float32)
    x64 = Stiefel(5, 2).random_point(generator=gen, dtype=F64)
    P.check_point((x32, x64))
    # 1e-7 off is fine in float32 and a violation in float64.
    assert not P.is_point((x32, x64 * (1 + 1e-7)))


# ---------------------------------------------------------------------------- the contract
def test_unsupported_dtype_error_is_type_and_value_error():
    assert issubclass(UnsupportedDtypeError, TypeError)
    assert issubclass(UnsupportedDtypeError, ValueError)
    St = Stiefel(4, 2)
    with pytest.raises(UnsupportedDtypeError, match=r"torch\.int64"):
        St.proju(torch.zeros(4, 2, dtype=torch.int64), torch.zeros(4, 2, dtype=torch.int64))
    with pytest.raises(UnsupportedDtypeError, match="complex"):
        St.proj(torch.zeros(4, 2, dtype=torch.complex128))
    with pytest.raises(TypeError, match=r"expected torch\.Tensor"):
        St.retr(np.zeros((4, 2)), np.zeros((4, 2)))
    assert default_tolerance(torch.float32) == 1e-5
    assert default_tolerance(F64) == 1e-10


def test_random_point_is_reproducible_and_respects_options(gen):
    St = Stiefel(5, 2)
    a = St.random_point(3, generator=torch.Generator().manual_seed(7), dtype=F64)
    b = St.random_point(3, generator=torch.Generator().manual_seed(7), dtype=F64)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert St.random_point(device="cpu").dtype == torch.get_default_dtype()
    assert St.random_point(generator=gen, dtype=torch.float32).dtype == torch.float32
    with pytest.raises(ValueError, match="batch dims must be ints >= 0"):
        St.random_point(-1)
    assert St.random_point(0, generator=gen).shape == (0, 5, 2)


def test_tolerances_can_be_loosened_and_tightened(gen):
    St = Stiefel(5, 2)
    x = St.random_point(generator=gen, dtype=F64)
    off = x * (1 + 1e-6)
    assert not St.is_point(off)
    assert St.is_point(off, atol=1e-5)
    St.check_point(off, atol=1e-5)
    u = St.random_tangent(x, generator=gen)
    assert not St.is_tangent(x, u + 1e-6 * x)
    assert St.is_tangent(x, u + 1e-6 * x, atol=1e-4)


def test_every_public_manifold_is_exported():
    exported = {name for name in manifolds.__all__}
    for cls in (Euclidean, Sphere, Stiefel, Grassmann, SPD, FixedRankFactored, Product):
        assert issubclass(cls, Manifold) and cls.__name__ in exported
    with pytest.raises(TypeError):
        Manifold()  # abstract


@pytest.mark.parametrize(
    "module",
    [
        "__init__",
        "base",
        "euclidean",
        "sphere",
        "stiefel",
        "grassmann",
        "spd",
        "fixed_rank",
        "product",
    ],
)
def test_docstring_examples_run(module):
    name = "shared_core.manifolds" + ("" if module == "__init__" else f".{module}")
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
