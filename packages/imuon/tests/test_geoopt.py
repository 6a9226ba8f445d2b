"""geoopt ``ManifoldParameter``s are stepped on their manifolds or refused (issue 20, part 3).

The recognition must work without geoopt installed, so most tests use stand-in classes that
carry geoopt's class names and module paths (and its ``projector`` / ``default_metric``
attributes); the last ones repeat the key checks with geoopt itself when it is installed.
"""

from __future__ import annotations

import pytest
import torch

from imuon import IMuon, tag
from imuon.geoopt_compat import geoopt_kind

D = torch.float64


def _standin(name: str, module: str, bases: tuple = (), **attrs):
    """A class named like geoopt's, defined "in" a geoopt module, instantiated."""
    cls = type(name, bases or (object,), {"__module__": module})
    obj = cls()
    for k, v in attrs.items():
        setattr(obj, k, v)
    return obj


def _manifold_param(x: torch.Tensor, manifold) -> torch.nn.Parameter:
    p = torch.nn.Parameter(x.clone())
    p.manifold = manifold  # what geoopt.ManifoldParameter carries
    return p


def _stiefel_point(n, p, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(n, p, dtype=D, generator=g))[0]


def _run(opt, params, loss_fn, steps):
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(*params).backward()
        opt.step()


def _sym(n, seed):
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(n, n, dtype=D, generator=g)
    return c + c.T


@pytest.mark.parametrize(
    ("cls", "metric"), [("EuclideanStiefel", "euclidean"), ("CanonicalStiefel", "canonical")]
)
def test_standin_stiefel_parameter_takes_the_tagged_stiefel_trajectory(cls, metric):
    C = _sym(13, 0)
    x0 = _stiefel_point(13, 4, 1)
    geo = _manifold_param(x0, _standin(cls, "geoopt.manifolds.stiefel"))
    ref = torch.nn.Parameter(x0.clone())
    loss = lambda X: torch.trace(X.T @ C @ X)  # noqa: E731
    _run(IMuon([geo], lr=0.05), [geo], loss, 50)  # an "auto" group
    _run(
        IMuon([{"params": [ref], "manifold": "stiefel", "stiefel_metric": metric}], lr=0.05),
        [ref],
        loss,
        50,
    )
    assert torch.equal(geo.detach(), ref.detach())
    err = float((geo.T @ geo - torch.eye(4, dtype=D)).abs().max())
    assert err < 64 * 13 * torch.finfo(D).eps  # polar retraction: orthonormal to round-off


def test_a_subclass_of_a_geoopt_manifold_maps_like_its_parent():
    parent = type("EuclideanStiefel", (), {"__module__": "geoopt.manifolds.stiefel"})
    child = type("EuclideanStiefelExact", (parent,), {"__module__": "geoopt.manifolds.stiefel"})
    mine = type("MyStiefel", (child,), {"__module__": "my_project.manifolds"})
    p = _manifold_param(_stiefel_point(6, 2, 0), mine())
    assert geoopt_kind(p) == ("stiefel", "euclidean")


def test_standin_sphere_step_equals_the_closed_form():
    # one step, momentum 0: xi = -(I - x x^T) g / ||(I - x x^T) g||, x+ = (x + lr xi) / ||.||
    C = _sym(9, 2)
    g0 = torch.Generator().manual_seed(3)
    x0 = torch.randn(9, dtype=D, generator=g0)
    x0 = x0 / x0.norm()
    p = _manifold_param(x0, _standin("Sphere", "geoopt.manifolds.sphere", projector=None))
    opt = IMuon([p], lr=0.1, momentum=0.0)
    _run(opt, [p], lambda v: v @ C @ v, 1)
    g = 2 * C @ x0
    r = g - x0 * (x0 @ g)
    want = x0 - 0.1 * r / r.norm()
    want = want / want.norm()
    torch.testing.assert_close(p.detach(), want, atol=32 * torch.finfo(D).eps, rtol=0)


def test_standin_sphere_converges_to_the_bottom_eigenvector():
    C = _sym(9, 4)
    x0 = torch.ones(9, dtype=D) / 3.0
    p = _manifold_param(x0, _standin("Sphere", "geoopt.manifolds.sphere", projector=None))
    tagged = tag(torch.nn.Parameter(x0.clone()), "sphere")
    for q in (p, tagged):
        opt = IMuon([q], lr=0.05, momentum=0.9, scaling="dual")
        _run(opt, [q], lambda v: v @ C @ v, 400)
    assert torch.equal(p.detach(), tagged.detach())
    lam, vec = torch.linalg.eigh(C)
    assert abs(float(p.norm()) - 1) < 1e-12
    # Rayleigh quotient at the minimum eigenvalue; the eigenvector up to sign
    assert abs(float(p @ C @ p) - float(lam[0])) < 1e-8 * float(lam.abs().max())
    assert float(min((p - vec[:, 0]).norm(), (p + vec[:, 0]).norm())) < 1e-4


def test_standin_spd_with_the_affine_invariant_metric_takes_the_spd_trajectory():
    aim = _standin(
        "SymmetricPositiveDefinite",
        "geoopt.manifolds.symmetric_positive_definite",
        default_metric=_standin(
            "SPDMetric", "geoopt.manifolds.symmetric_positive_definite", value="AIM"
        ),
    )
    target = torch.diag(torch.tensor([1.0, 2.0, 5.0, 0.5, 3.0], dtype=D))
    geo = _manifold_param(torch.eye(5, dtype=D), aim)
    ref = torch.nn.Parameter(torch.eye(5, dtype=D))
    loss = lambda X: (X - target).pow(2).sum()  # noqa: E731
    _run(IMuon([geo], lr=0.05), [geo], loss, 20)
    _run(IMuon([{"params": [ref], "manifold": "spd"}], lr=0.05), [ref], loss, 20)
    assert torch.equal(geo.detach(), ref.detach())


@pytest.mark.parametrize(
    ("manifold", "shape", "match"),
    [
        (("PoincareBall", "geoopt.manifolds.stereographic.manifold", {}), (4,), "no IMuon step"),
        (("ProductManifold", "geoopt.manifolds.product", {}), (4, 3), "no IMuon step"),
        (("Sphere", "geoopt.manifolds.sphere", {"projector": torch.eye(4)}), (4,), "subspace"),
        (("Sphere", "geoopt.manifolds.sphere", {"projector": None}), (3, 4), "product of"),
        (
            (
                "SymmetricPositiveDefinite",
                "geoopt.manifolds.symmetric_positive_definite",
                {"default_metric": "LEM"},
            ),
            (3, 3),
            "AIM",
        ),
    ],
)
def test_unsupported_geoopt_manifolds_are_refused_at_construction(manifold, shape, match):
    name, module, attrs = manifold
    p = _manifold_param(torch.ones(shape, dtype=D), _standin(name, module, **attrs))
    with pytest.raises(ValueError, match=match):
        IMuon([p])


def test_a_geoopt_stiefel_parameter_in_a_conflicting_group_is_refused():
    p = _manifold_param(
        _stiefel_point(7, 3, 5), _standin("EuclideanStiefel", "geoopt.manifolds.stiefel")
    )
    with pytest.raises(ValueError, match="leave the manifold"):
        IMuon([{"params": [p], "manifold": "euclidean"}])
    opt = IMuon([torch.nn.Parameter(torch.randn(3, 3))])
    with pytest.raises(ValueError, match="leave the manifold"):
        opt.add_param_group({"params": [p], "manifold": "adamw"})


def test_a_manifold_attribute_from_another_library_is_ignored():
    # only classes defined in geoopt's modules count; anything else routes as untagged
    p = _manifold_param(torch.randn(5, 3, dtype=D), _standin("Stiefel", "other_lib.manifolds"))
    assert geoopt_kind(p) is None
    IMuon([p])  # plain Muon route, no error


def test_the_euclidean_geoopt_manifold_routes_as_untagged():
    w = _manifold_param(
        torch.randn(6, 4, dtype=D), _standin("Euclidean", "geoopt.manifolds.euclidean")
    )
    v = _manifold_param(
        torch.randn(6, dtype=D), _standin("Euclidean", "geoopt.manifolds.euclidean")
    )
    opt = IMuon([w, v])
    assert [opt._kind(opt.param_groups[0], t) for t in (w, v)] == ["euclidean", "adamw"]


# ---------------------------------------------------------------- with geoopt itself
def test_real_geoopt_parameters_are_mapped_and_stay_on_their_manifolds():
    geoopt = pytest.importorskip("geoopt")
    C = _sym(12, 6)
    x0 = _stiefel_point(12, 5, 7)
    W = geoopt.ManifoldParameter(x0.clone(), manifold=geoopt.EuclideanStiefel())
    ref = torch.nn.Parameter(x0.clone())
    loss = lambda X: torch.trace(X.T @ C @ X)  # noqa: E731
    _run(IMuon([W], lr=0.05), [W], loss, 50)
    _run(IMuon([{"params": [ref], "manifold": "stiefel"}], lr=0.05), [ref], loss, 50)
    assert torch.equal(W.detach(), ref.detach())
    # before the mapping: plain Muon steps, |X^T X - I| = 27.7 after 50 steps
    assert float((W.T @ W - torch.eye(5, dtype=D)).abs().max()) < 64 * 12 * torch.finfo(D).eps
    # geoopt.Stiefel() is canonical by default; Sphere and SPD map; others are refused
    assert geoopt_kind(geoopt.ManifoldParameter(x0, manifold=geoopt.Stiefel())) == (
        "stiefel",
        "canonical",
    )
    v = torch.ones(7, dtype=D) / 7**0.5
    assert geoopt_kind(geoopt.ManifoldParameter(v, manifold=geoopt.Sphere())).manifold == "sphere"
    spd = geoopt.ManifoldParameter(
        torch.eye(3, dtype=D), manifold=geoopt.SymmetricPositiveDefinite()
    )
    assert geoopt_kind(spd).manifold == "spd"
    assert geoopt_kind(geoopt.ManifoldParameter(x0, manifold=geoopt.Euclidean())).manifold is None
    ball = geoopt.ManifoldParameter(torch.zeros(4, dtype=D), manifold=geoopt.PoincareBall())
    with pytest.raises(ValueError, match="PoincareBall"):
        IMuon([ball])
