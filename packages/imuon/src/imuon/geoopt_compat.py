"""Reading geoopt's ``ManifoldParameter`` manifolds without importing geoopt.

A tensor created as ``geoopt.ManifoldParameter(x, manifold=geoopt.Stiefel())`` carries its
manifold object in ``.manifold``. IMuon maps the manifolds it has closed-form steps for and
refuses the others with a clear error (a Stiefel parameter stepped as a plain matrix leaves the
manifold: |XᵀX - I| = 27.7 after 50 Muon steps). geoopt is an optional dependency, so the
recognition is by class name along the manifold's MRO, restricted to classes defined in a
``geoopt`` module; subclasses of a supported manifold map like their parent.
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

__all__ = ["GeooptKind", "geoopt_kind"]


class GeooptKind(NamedTuple):
    """IMuon's manifold for a geoopt tensor (``None``: no constraint, routed as untagged) and
    the Stiefel metric it implies (``None`` for other manifolds)."""

    manifold: str | None
    stiefel_metric: str | None = None


# geoopt class name -> IMuon manifold; the first geoopt class along the MRO decides
_SUPPORTED = {
    "EuclideanStiefel": GeooptKind("stiefel", "euclidean"),
    "CanonicalStiefel": GeooptKind("stiefel", "canonical"),
    "Sphere": GeooptKind("sphere"),
    "SymmetricPositiveDefinite": GeooptKind("spd"),
    "Euclidean": GeooptKind(None),
}
_NAMES = (
    "Stiefel (Euclidean or canonical metric), Sphere (one vector), "
    "SymmetricPositiveDefinite (AIM metric), Euclidean"
)


def _from_geoopt(cls: type) -> bool:
    return cls.__module__.split(".", 1)[0] == "geoopt"


def geoopt_kind(param: Tensor) -> GeooptKind | None:
    """IMuon's reading of ``param.manifold`` when it is a geoopt manifold, else ``None``.

    Raises:
        ValueError: a geoopt manifold IMuon has no step for (Poincaré ball, Lorentz, product,
            scaled, Birkhoff polytope, ...), a sphere intersected with a subspace or over the
            rows of a matrix, or an SPD manifold with a metric other than affine-invariant.
    """
    manifold = getattr(param, "manifold", None)
    if manifold is None:
        return None
    mro = [c for c in type(manifold).__mro__ if _from_geoopt(c)]
    if not mro:
        return None  # some other library's attribute of the same name
    name = next((c.__name__ for c in mro if c.__name__ in _SUPPORTED), None)
    shown = type(manifold).__name__
    if name is None:
        raise ValueError(
            f"geoopt manifold {shown} has no IMuon step (IMuon maps: {_NAMES}); optimise "
            "this parameter with a geoopt optimizer (e.g. geoopt.optim.RiemannianAdam) "
            "instead"
        )
    if name == "Sphere":
        if getattr(manifold, "projector", None) is not None:
            raise ValueError(
                f"geoopt {shown} intersected with a subspace has no IMuon step (only the "
                "unconstrained sphere maps, to IMuon's 'sphere')"
            )
        if param.ndim != 1:
            raise ValueError(
                f"geoopt {shown} on a tensor of shape {tuple(param.shape)} is a product of "
                "spheres (one per row); IMuon's 'sphere' is one vector: use one parameter per "
                "vector, or Stiefel for orthonormal rows"
            )
    if name == "SymmetricPositiveDefinite":
        metric = getattr(manifold, "default_metric", "AIM")
        metric = str(getattr(metric, "value", metric))
        if metric != "AIM":
            raise ValueError(
                f"geoopt SymmetricPositiveDefinite with metric {metric}: IMuon's 'spd' steps "
                "in the affine-invariant metric (AIM) only"
            )
    return _SUPPORTED[name]
