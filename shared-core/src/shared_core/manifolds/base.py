r"""The one interface every manifold of :mod:`shared_core.manifolds` implements.

A manifold object is stateless geometry: it holds sizes and option names, never points.
Points and tangent vectors are plain tensors (or tuples of tensors for the factored fixed-rank
manifold and for products) with any number of leading batch dims; each operation works on
every batch entry independently.

Conventions shared by all manifolds:

- ``inner(x, u, v)`` and ``norm(x, u)`` reduce over the manifold's own dims and return a tensor
  of the batch shape (a 0-d tensor for an unbatched point).
- ``inner`` also accepts ambient (non-tangent) vectors: every metric here is implemented as an
  inner product on the whole ambient space that restricts to the metric on tangent vectors, and
  ``proju`` is the orthogonal projection for that ambient inner product. So
  ``inner(x, proju(x, a), b) == inner(x, a, proju(x, b))`` for all ambient ``a, b``.
- ``random_point(*batch_shape)`` takes the leading batch shape only; the manifold knows the
  rest (``Stiefel(7, 3).random_point(4)`` has shape ``(4, 7, 3)``).
- dtypes: float32 and float64. Half precision (bfloat16, float16) and any other dtype raise
  :class:`UnsupportedDtypeError` rather than being upcast: QR, SVD and eigh have no
  half-precision kernels, and a point rounded back to bfloat16 is off the manifold by about
  ``1e-2``, so an upcast that returns half-precision points would silently break the
  constraint. Keep float32 master copies of manifold parameters.
- ``check_point`` / ``check_tangent`` raise ``ValueError`` saying what is wrong and by how
  much; ``is_point`` / ``is_tangent`` return the same verdict as a bool. Default tolerances
  are ``1e-5`` (float32) and ``1e-10`` (float64); a test passes when
  ``error <= atol + rtol * scale`` with the error and the scale named in each message.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

__all__ = ["Manifold", "NoClosedFormError", "UnsupportedDtypeError", "default_tolerance"]

#: A point or tangent vector: a tensor, or a (named) tuple of them, nested for products.
Point = Any
Vector = Any

_SUPPORTED = (torch.float32, torch.float64)
_DEFAULT_TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


class NoClosedFormError(NotImplementedError):
    """The manifold has no closed form for this map (an exponential or logarithm map, a
    distance); use :meth:`Manifold.retr` instead. A definite answer, not missing code."""


class UnsupportedDtypeError(TypeError, ValueError):
    """A manifold received a tensor that is not float32 or float64.

    It derives from both ``TypeError`` (the honest category) and ``ValueError`` (what callers
    that validate inputs usually catch).
    """


def default_tolerance(dtype: torch.dtype) -> float:
    """The default ``atol`` and ``rtol`` of the checks for ``dtype`` (float32 or float64).

    Example:
        >>> default_tolerance(torch.float32)
        1e-05
    """
    if dtype not in _DEFAULT_TOL:
        raise UnsupportedDtypeError(f"no default tolerance for {dtype}; use float32 or float64")
    return _DEFAULT_TOL[dtype]


def positive_int(name: str, value: object) -> int:
    """``value`` as an int; ``ValueError`` naming ``name`` unless it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def choice(name: str, value: object, options: tuple[str, ...]) -> str:
    """``value`` if it is one of ``options``; else a ``ValueError`` listing them."""
    if value not in options:
        raise ValueError(f"unknown {name} {value!r}; expected one of {', '.join(options)}")
    return value  # type: ignore[return-value]


def _leaves(obj: object) -> Iterator[object]:
    if isinstance(obj, tuple | list):
        for item in obj:
            yield from _leaves(item)
    else:
        yield obj


def _format_index(flat: int, batch: torch.Size) -> str:
    if len(batch) == 0:
        return ""
    idx = []
    for size in reversed(batch):
        idx.append(flat % size)
        flat //= size
    return f" (worst at batch index {tuple(reversed(idx))})"


def exceeds(err: Tensor, bound: Tensor | float, what: str) -> str | None:
    """A message if any entry of the batch-shaped ``err`` is above ``bound``, else ``None``.

    NaN errors count as violations, so a NaN can never pass a check.
    """
    bound_t = torch.as_tensor(bound, dtype=err.dtype, device=err.device).expand_as(err)
    bad = ~(err <= bound_t)
    if not bool(bad.any()):
        return None
    margin = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err - bound_t)
    flat = int(margin.reshape(-1).argmax())
    worst = float(err.reshape(-1)[flat])
    lim = float(bound_t.reshape(-1)[flat])
    return f"{what} = {worst:.3g} exceeds the tolerance {lim:.3g}{_format_index(flat, err.shape)}"


def shape_error(t: Tensor, trailing: tuple[int, ...], what: str) -> str | None:
    """A message unless ``t`` has shape ``(..., *trailing)``, else ``None``."""
    k = len(trailing)
    if t.ndim < k or tuple(t.shape[t.ndim - k :]) != trailing:
        dims = ", ".join(str(d) for d in trailing)
        return f"{what} must have shape (..., {dims}); got {tuple(t.shape)}"
    return None


def match_error(x: Tensor, u: Tensor, what: str = "tangent vector") -> str | None:
    """A message unless ``u`` has exactly the shape of the point ``x``, else ``None``."""
    if u.shape != x.shape:
        return f"the {what} must have the point's shape {tuple(x.shape)}; got {tuple(u.shape)}"
    return None


def finite_error(t: Tensor, what: str) -> str | None:
    """A message if ``t`` holds NaN or inf, else ``None``."""
    if not bool(torch.isfinite(t).all()):
        return f"{what} contains NaN or inf"
    return None


class Manifold(ABC):
    r"""A Riemannian manifold (or a quotient, through its horizontal space) embedded in R^N.

    Subclasses implement the underscored methods; the public methods validate dtypes and
    delegate. For a quotient manifold (Grassmann, FixedRankFactored) points are
    representatives in the total space and tangent vectors are horizontal lifts; ``proju``
    projects onto the horizontal space.

    The aliases :meth:`retract`, :meth:`transport` and :meth:`egrad_to_rgrad` spell the same
    operations as :meth:`retr`, :meth:`transp` and :meth:`egrad2rgrad`.

    Example (one Riemannian gradient step with momentum transport):
        >>> import torch
        >>> from shared_core.manifolds import Sphere
        >>> S = Sphere(4)
        >>> g = torch.Generator().manual_seed(0)
        >>> x = S.random_point(generator=g, dtype=torch.float64)
        >>> m = S.zero_tangent(x)
        >>> grad = S.egrad2rgrad(x, torch.randn(4, generator=g, dtype=torch.float64))
        >>> m = 0.9 * m + grad
        >>> y = S.retr(x, -0.1 * m)
        >>> m = S.transp(x, y, m)
        >>> S.is_point(y), S.is_tangent(y, m)
        (True, True)
    """

    # ------------------------------------------------------------------ description
    @property
    @abstractmethod
    def dim(self) -> int:
        """The manifold dimension (the dimension of each (horizontal) tangent space)."""

    #: How many trailing dims of a point tensor (or of each tensor of a tuple point) belong
    #: to the point itself rather than to the batch.
    _point_ndim: int = 2

    def batch_shape(self, x: Point) -> torch.Size:
        """The leading batch shape of the point ``x``."""
        leaf = next(iter(_leaves(x)))
        if not isinstance(leaf, Tensor):
            raise TypeError(f"{self!r}: expected torch.Tensor inputs, got {type(leaf).__name__}")
        return leaf.shape[: max(leaf.ndim - self._point_ndim, 0)]

    # ------------------------------------------------------------------ public API
    def proj(self, x: Point) -> Point:
        """Map an ambient point onto the manifold (nearest point where that is defined)."""
        self._guard(x)
        return self._proj(x)

    def proju(self, x: Point, u: Vector) -> Vector:
        """Project an ambient vector ``u`` onto the (horizontal) tangent space at ``x``.

        The projection is orthogonal for the ambient extension of the metric that
        :meth:`inner` computes (stated per manifold in its class docstring).

        Args:
            x: a point, batch shape ``B``.
            u: an ambient vector at ``x`` (same layout as a point, or the manifold's stated
                ambient form).

        Returns:
            The tangent vector ``P_x(u)``; ``proju(x, proju(x, u)) == proju(x, u)``.
        """
        self._guard(x, u)
        return self._proju(x, u)

    def retr(self, x: Point, u: Vector) -> Point:
        """A retraction: a point ``R_x(u) = x + u + O(|u|^2)`` on the manifold.

        Args:
            x: a point.
            u: a tangent vector at ``x`` (the step, already scaled by the learning rate).

        Returns:
            A point of the manifold with ``R_x(0) = x`` and ``d/dt R_x(t u)|_0 = u``.
        """
        self._guard(x, u)
        return self._retr(x, u)

    def expmap(self, x: Point, u: Vector) -> Point:
        """The Riemannian exponential map: the geodesic from ``x`` with velocity ``u`` at t=1.

        Raises:
            NoClosedFormError: for manifolds whose geodesics have no closed form (named in
                the class docstring); use :meth:`retr` there.
        """
        self._guard(x, u)
        return self._expmap(x, u)

    def logmap(self, x: Point, y: Point) -> Vector:
        """The inverse of :meth:`expmap` near ``x``: the tangent ``u`` with ``exp_x(u) = y``."""
        self._guard(x, y)
        return self._logmap(x, y)

    def dist(self, x: Point, y: Point) -> Tensor:
        """The geodesic distance, batch-shaped."""
        self._guard(x, y)
        return self._dist(x, y)

    def transp(self, x: Point, y: Point, v: Vector) -> Vector:
        """Transport a tangent vector ``v`` at ``x`` to the tangent space at ``y``.

        Projection-based (``proju(y, v)``) unless the class docstring names a closed-form
        parallel transport (SPD). Used to carry momentum between iterates.

        Returns:
            A tangent vector at ``y``.
        """
        self._guard(x, y, v)
        return self._transp(x, y, v)

    def inner(self, x: Point, u: Vector, v: Vector | None = None) -> Tensor:
        """The metric ``<u, v>_x`` (``v`` defaults to ``u``).

        Args:
            x: a point, batch shape ``B``.
            u, v: (ambient or tangent) vectors at ``x``.

        Returns:
            A tensor of shape ``B`` (0-d for one point).
        """
        if v is None:
            v = u
        self._guard(x, u, v)
        return self._inner(x, u, v)

    def norm(self, x: Point, u: Vector) -> Tensor:
        """``sqrt(<u, u>_x)``, batch-shaped."""
        return self.inner(x, u).clamp_min(0).sqrt()

    def egrad2rgrad(self, x: Point, egrad: Vector) -> Vector:
        """The Riemannian gradient from the Euclidean one.

        It is the (horizontal) tangent vector ``g`` with ``<g, u>_x = <egrad, u>_F`` for every
        (horizontal) tangent ``u``: the Riesz representer of the differential under the metric.

        Args:
            x: a point.
            egrad: the gradient of ``f`` with respect to the point's ambient coordinates (for
                example ``X.grad``; for FixedRankFactored the pair of factor gradients).

        Returns:
            The Riemannian gradient, a (horizontal) tangent vector at ``x``.
        """
        self._guard(x, egrad)
        return self._egrad2rgrad(x, egrad)

    def random_point(
        self,
        *batch_shape: int,
        generator: torch.Generator | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> Point:
        """A random point per batch entry (shape ``(*batch_shape, ...)``).

        Args:
            *batch_shape: leading batch dims (none for one point).
            generator: a torch generator for reproducible draws (sampled on its device).
            dtype: float32 or float64; default ``torch.get_default_dtype()``.
            device: where the result lives.
        """
        dtype = torch.get_default_dtype() if dtype is None else dtype
        if dtype not in _SUPPORTED:
            raise UnsupportedDtypeError(
                f"{self!r}: random_point needs dtype float32 or float64, got {dtype}"
            )
        for b in batch_shape:
            if not isinstance(b, int) or b < 0:
                raise ValueError(f"batch dims must be ints >= 0, got {batch_shape!r}")
        return self._random_point(tuple(batch_shape), generator, dtype, device)

    def random_tangent(self, x: Point, generator: torch.Generator | None = None) -> Vector:
        """A random (horizontal) tangent vector at ``x`` (a projected Gaussian)."""
        self._guard(x)
        return self._random_tangent(x, generator)

    def zero_tangent(self, x: Point) -> Vector:
        """The zero tangent vector at ``x`` (e.g. to start a momentum buffer)."""
        self._guard(x)
        return self._zero_tangent(x)

    def check_point(
        self, x: Point, *, atol: float | None = None, rtol: float | None = None
    ) -> None:
        """Raise ``ValueError`` unless ``x`` is a point of the manifold (within tolerance).

        Args:
            x: the candidate point (any batch shape).
            atol, rtol: tolerances; defaults from :func:`default_tolerance` of the dtype.

        Raises:
            ValueError: naming the violated condition, its size, the tolerance and the worst
                batch index (wrong shape, NaN/inf, not orthonormal, not symmetric, not
                positive definite, rank-deficient, ...).
        """
        msg = self._point_message(x, atol, rtol)
        if msg is not None:
            raise ValueError(f"{self!r}: not a point: {msg}")

    def check_tangent(
        self, x: Point, u: Vector, *, atol: float | None = None, rtol: float | None = None
    ) -> None:
        """Raise ``ValueError`` unless ``u`` is a (horizontal) tangent vector at ``x``."""
        msg = self._tangent_message(x, u, atol, rtol)
        if msg is not None:
            raise ValueError(f"{self!r}: not a tangent vector: {msg}")

    def is_point(self, x: Point, *, atol: float | None = None, rtol: float | None = None) -> bool:
        """Whether :meth:`check_point` would pass."""
        return self._point_message(x, atol, rtol) is None

    def is_tangent(
        self, x: Point, u: Vector, *, atol: float | None = None, rtol: float | None = None
    ) -> bool:
        """Whether :meth:`check_tangent` would pass."""
        return self._tangent_message(x, u, atol, rtol) is None

    # Spellings of the design document; they dispatch to the same implementations.
    def retract(self, x: Point, u: Vector) -> Point:
        """Alias of :meth:`retr`."""
        return self.retr(x, u)

    def transport(self, x: Point, y: Point, v: Vector) -> Vector:
        """Alias of :meth:`transp`."""
        return self.transp(x, y, v)

    def egrad_to_rgrad(self, x: Point, egrad: Vector) -> Vector:
        """Alias of :meth:`egrad2rgrad`."""
        return self.egrad2rgrad(x, egrad)

    # ------------------------------------------------------------------ plumbing
    def _guard(self, *objs: object) -> None:
        for leaf in _leaves(objs):
            if not isinstance(leaf, Tensor):
                raise TypeError(
                    f"{self!r}: expected torch.Tensor inputs (or tuples of them), "
                    f"got {type(leaf).__name__}"
                )
            if leaf.dtype not in _SUPPORTED:
                raise UnsupportedDtypeError(
                    f"{self!r}: needs float32 or float64 tensors, got {leaf.dtype}; "
                    "upcast with .float() (and keep the float32 copy as the parameter)"
                )

    def _tolerances(self, x: Point, atol: float | None, rtol: float | None):
        dtype = next(iter(_leaves(x))).dtype
        tol = _DEFAULT_TOL[dtype]
        return (tol if atol is None else float(atol)), (tol if rtol is None else float(rtol))

    def _point_message(self, x: Point, atol: float | None, rtol: float | None) -> str | None:
        msg = self._structure_message(x)
        if msg is not None:
            return msg
        self._guard(x)
        a, r = self._tolerances(x, atol, rtol)
        return self._point_error(x, a, r)

    def _tangent_message(
        self, x: Point, u: Vector, atol: float | None, rtol: float | None
    ) -> str | None:
        msg = self._structure_message(x) or self._structure_message(u, "tangent vector")
        if msg is not None:
            return msg
        self._guard(x, u)
        a, r = self._tolerances(x, atol, rtol)
        return self._tangent_error(x, u, a, r)

    def _structure_message(self, obj: object, what: str = "point") -> str | None:
        """Type checks before any arithmetic; tensor manifolds need a single tensor."""
        if not isinstance(obj, Tensor):
            return f"the {what} must be a torch.Tensor, got {type(obj).__name__}"
        return None

    def _zero_tangent(self, x: Point) -> Vector:
        return torch.zeros_like(x)

    # ------------------------------------------------------------------ to implement
    @abstractmethod
    def _proj(self, x: Point) -> Point: ...

    @abstractmethod
    def _proju(self, x: Point, u: Vector) -> Vector: ...

    @abstractmethod
    def _retr(self, x: Point, u: Vector) -> Point: ...

    def _expmap(self, x: Point, u: Vector) -> Point:
        raise NoClosedFormError(
            f"{self!r} has no closed-form exponential map; use retr(x, u), a first-order retraction"
        )

    def _logmap(self, x: Point, y: Point) -> Vector:
        raise NoClosedFormError(f"{self!r} has no closed-form logarithm map")

    def _dist(self, x: Point, y: Point) -> Tensor:
        raise NoClosedFormError(f"{self!r} has no closed-form geodesic distance")

    @abstractmethod
    def _transp(self, x: Point, y: Point, v: Vector) -> Vector: ...

    @abstractmethod
    def _inner(self, x: Point, u: Vector, v: Vector) -> Tensor: ...

    @abstractmethod
    def _egrad2rgrad(self, x: Point, egrad: Vector) -> Vector: ...

    @abstractmethod
    def _random_point(self, batch, generator, dtype, device) -> Point: ...

    @abstractmethod
    def _random_tangent(self, x: Point, generator: torch.Generator | None) -> Vector: ...

    @abstractmethod
    def _point_error(self, x: Point, atol: float, rtol: float) -> str | None: ...

    @abstractmethod
    def _tangent_error(self, x: Point, u: Vector, atol: float, rtol: float) -> str | None: ...
