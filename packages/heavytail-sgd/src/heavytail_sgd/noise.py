r"""Heavy-tailed noise models: symmetric alpha-stable, Student-t, symmetric Pareto.

Every model draws i.i.d. symmetric coordinates with a polynomial tail
:math:`P(|X| > x) \asymp x^{-a}` whose *tail index* :math:`a` decides which absolute
moments exist: :math:`E|X|^q < \infty` iff :math:`q < a`. That is the quantity the heavy-tail
analysis runs on: the noise has a finite :math:`p`-th moment for every :math:`p < a`, and for
no :math:`p \ge a`.

All samplers are plain torch (CPU or CUDA) and take an optional ``torch.Generator`` so that a
run is reproducible on its own, whatever else touches the global RNG.

Example:
    >>> import torch
    >>> noise = SymmetricPareto(alpha=1.5)
    >>> noise.finite_moment(1.2), noise.finite_moment(1.5)
    (True, False)
    >>> x = noise.sample((1000,), generator=torch.Generator().manual_seed(0))
    >>> bool((x.abs() >= 1.0).all())
    True
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch

__all__ = [
    "NoiseModel",
    "StudentT",
    "SymmetricAlphaStable",
    "SymmetricPareto",
    "norm_moment_bound",
]

Shape = int | Sequence[int]


def _shape(shape: Shape) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(shape)
    if any((not isinstance(s, int)) or isinstance(s, bool) or s < 0 for s in shape):
        raise ValueError(f"shape must be non-negative ints, got {shape!r}")
    return shape


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def _uniform_open(
    shape: tuple[int, ...], generator: torch.Generator | None, device, dtype
) -> torch.Tensor:
    """Uniform on the open interval (0, 1): logs and negative powers of it stay finite."""
    u = torch.rand(shape, generator=generator, device=device, dtype=dtype)
    tiny = torch.finfo(dtype).tiny
    return u.clamp_(min=tiny)


def _device_of(generator: torch.Generator | None, device) -> torch.device:
    if device is not None:
        return torch.device(device)
    if generator is not None:
        return generator.device
    return torch.device("cpu")


class NoiseModel(ABC):
    """A symmetric, zero-median distribution with a known tail index.

    Subclasses implement :meth:`sample` and :meth:`abs_moment`; the rest follows.
    """

    scale: float

    @property
    @abstractmethod
    def tail_index(self) -> float:
        r"""The :math:`a` with :math:`E|X|^q < \infty` exactly for :math:`q < a` (inf: all)."""

    def finite_moment(self, p: float) -> bool:
        """Whether ``E|X|^p`` is finite for one coordinate ``X``.

        Args:
            p: the moment order, positive.

        Returns:
            ``p < tail_index``.
        """
        p = _positive("p", p)
        return p < self.tail_index

    @abstractmethod
    def abs_moment(self, p: float) -> float:
        """``E|X|^p`` of one coordinate in closed form (``inf`` where it diverges)."""

    @abstractmethod
    def _draw(self, shape: tuple[int, ...], generator, device, dtype) -> torch.Tensor: ...

    def sample(
        self,
        shape: Shape,
        *,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """Draw i.i.d. coordinates.

        Args:
            shape: output shape.
            generator: a ``torch.Generator`` on the target device (default: global RNG).
            device: where to draw (default: the generator's device, else CPU).
            dtype: a floating dtype.

        Returns:
            A tensor of the given shape, dtype and device.
        """
        shape = _shape(shape)
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be floating point, got {dtype}")
        return self._draw(shape, generator, _device_of(generator, device), dtype)


class SymmetricAlphaStable(NoiseModel):
    r"""Symmetric :math:`\alpha`-stable law :math:`S\alpha S(c)`, drawn by Chambers-Mallows-Stuck.

    Characteristic function :math:`E e^{iuX} = \exp(-|c u|^\alpha)`, :math:`0<\alpha\le 2`
    (:math:`\alpha=2` is :math:`N(0, 2c^2)`, :math:`\alpha=1` Cauchy). With
    :math:`V \sim U(-\pi/2, \pi/2)` and :math:`W \sim \mathrm{Exp}(1)` independent,

    .. math::
        X = c\,\frac{\sin(\alpha V)}{(\cos V)^{1/\alpha}}
            \left(\frac{\cos((1-\alpha)V)}{W}\right)^{(1-\alpha)/\alpha}.

    Absolute moments (:math:`q<\alpha`):
    :math:`E|X|^q = c^q\, 2^q\, \Gamma(\tfrac{1+q}{2})\,\Gamma(1-q/\alpha)
    / (\sqrt{\pi}\,\Gamma(1-q/2))`.

    Args:
        alpha: stability index in (0, 2].
        scale: :math:`c > 0`.

    Example:
        >>> SymmetricAlphaStable(1.5).tail_index
        1.5
        >>> SymmetricAlphaStable(2.0).finite_moment(4.0)
        True
    """

    def __init__(self, alpha: float, scale: float = 1.0) -> None:
        alpha = _positive("alpha", alpha)
        if alpha > 2:
            raise ValueError(f"alpha must lie in (0, 2], got {alpha!r}")
        self.alpha = alpha
        self.scale = _positive("scale", scale)

    def __repr__(self) -> str:
        return f"SymmetricAlphaStable(alpha={self.alpha}, scale={self.scale})"

    @property
    def tail_index(self) -> float:
        return math.inf if self.alpha == 2 else self.alpha

    def abs_moment(self, p: float) -> float:
        p = _positive("p", p)
        if not self.finite_moment(p):
            return math.inf
        a = self.alpha
        # Gamma(1 - p/2) has poles at p = 2, 4, ...: there the Gaussian (a = 2) moment is
        # 2^p c^p Gamma((1+p)/2)/sqrt(pi), the limit of the formula as a -> 2.
        if a == 2:
            return self.scale**p * 2**p * math.gamma((1 + p) / 2) / math.sqrt(math.pi)
        num = 2**p * math.gamma((1 + p) / 2) * math.gamma(1 - p / a)
        return self.scale**p * num / (math.sqrt(math.pi) * math.gamma(1 - p / 2))

    def _draw(self, shape, generator, device, dtype):
        a = self.alpha
        v = (_uniform_open(shape, generator, device, dtype) - 0.5) * math.pi
        w = -torch.log(_uniform_open(shape, generator, device, dtype))
        if a == 1:
            x = torch.tan(v)
        else:
            x = (
                torch.sin(a * v)
                / torch.cos(v).pow(1 / a)
                * (torch.cos((1 - a) * v) / w).pow((1 - a) / a)
            )
        return x * self.scale


class StudentT(NoiseModel):
    r"""Student-t with :math:`\nu` degrees of freedom, scaled by :math:`c`.

    Drawn by Bailey's polar method (exact, uniforms only, so a ``torch.Generator`` controls it):
    take :math:`(U, V)` uniform on the unit disc, :math:`W = U^2 + V^2`; then
    :math:`U\sqrt{\nu (W^{-2/\nu} - 1)/W} \sim t_\nu`. Tail index :math:`\nu`;
    :math:`E|X|^q = c^q \nu^{q/2}\,\Gamma(\tfrac{1+q}{2})\Gamma(\tfrac{\nu-q}{2})
    / (\sqrt{\pi}\,\Gamma(\tfrac{\nu}{2}))` for :math:`q<\nu`.

    Args:
        df: degrees of freedom :math:`\nu > 0`.
        scale: :math:`c > 0`.

    Example:
        >>> StudentT(3.0).finite_moment(2.0), StudentT(3.0).finite_moment(3.0)
        (True, False)
    """

    def __init__(self, df: float, scale: float = 1.0) -> None:
        self.df = _positive("df", df)
        self.scale = _positive("scale", scale)

    def __repr__(self) -> str:
        return f"StudentT(df={self.df}, scale={self.scale})"

    @property
    def tail_index(self) -> float:
        return self.df

    def abs_moment(self, p: float) -> float:
        p = _positive("p", p)
        if not self.finite_moment(p):
            return math.inf
        nu = self.df
        # log-gamma keeps large df from overflowing.
        log_m = (
            p / 2 * math.log(nu)
            + math.lgamma((1 + p) / 2)
            + math.lgamma((nu - p) / 2)
            - math.lgamma(nu / 2)
            - 0.5 * math.log(math.pi)
        )
        return self.scale**p * math.exp(log_m)

    def _draw(self, shape, generator, device, dtype):
        n = math.prod(shape)
        out = torch.empty(n, device=device, dtype=dtype)
        filled = 0
        while filled < n:
            # The disc keeps pi/4 of the square: oversample so one round is nearly always enough.
            m = int((n - filled) * 1.35) + 16
            u = torch.rand(m, generator=generator, device=device, dtype=dtype) * 2 - 1
            v = torch.rand(m, generator=generator, device=device, dtype=dtype) * 2 - 1
            w = u * u + v * v
            keep = (w < 1) & (w > 0)
            u, w = u[keep], w[keep]
            t = u * torch.sqrt(self.df * (w.pow(-2 / self.df) - 1) / w)
            take = min(t.numel(), n - filled)
            out[filled : filled + take] = t[:take]
            filled += take
        return out.reshape(shape) * self.scale


class SymmetricPareto(NoiseModel):
    r"""Symmetric Pareto: :math:`X = S\,x_m U^{-1/\alpha}` with a random sign :math:`S`.

    :math:`P(|X| > x) = (x_m/x)^{\alpha}` for :math:`x \ge x_m`, so the tail index is
    :math:`\alpha` and :math:`E|X|^q = \alpha x_m^q/(\alpha - q)` for :math:`q<\alpha`.

    Args:
        alpha: tail index :math:`> 0`.
        scale: :math:`x_m > 0`, the smallest magnitude.

    Example:
        >>> SymmetricPareto(3.0).abs_moment(1.0)
        1.5
    """

    def __init__(self, alpha: float, scale: float = 1.0) -> None:
        self.alpha = _positive("alpha", alpha)
        self.scale = _positive("scale", scale)

    def __repr__(self) -> str:
        return f"SymmetricPareto(alpha={self.alpha}, scale={self.scale})"

    @property
    def tail_index(self) -> float:
        return self.alpha

    def abs_moment(self, p: float) -> float:
        p = _positive("p", p)
        if not self.finite_moment(p):
            return math.inf
        return self.alpha * self.scale**p / (self.alpha - p)

    def survival(self, x: float) -> float:
        """``P(|X| > x)`` in closed form."""
        if x < self.scale:
            return 1.0
        return (self.scale / x) ** self.alpha

    def _draw(self, shape, generator, device, dtype):
        u = _uniform_open(shape, generator, device, dtype)
        sign = torch.rand(shape, generator=generator, device=device, dtype=dtype) < 0.5
        mag = self.scale * u.pow(-1 / self.alpha)
        return torch.where(sign, -mag, mag)


def norm_moment_bound(noise: NoiseModel, p: float, dim: int) -> float:
    r"""A bound :math:`\sigma` with :math:`E\|\xi\|_2^p \le \sigma^p` for :math:`\xi \in R^{dim}`.

    For :math:`p \le 2`, :math:`\|\xi\|_2 \le \|\xi\|_p`, hence
    :math:`E\|\xi\|_2^p \le \sum_i E|\xi_i|^p = d\,E|\xi_1|^p` and
    :math:`\sigma = (d\,E|\xi_1|^p)^{1/p}`. This is the :math:`\sigma` the schedules take.

    Args:
        noise: i.i.d. coordinate model.
        p: moment order in (0, 2]; must be finite for ``noise``.
        dim: number of coordinates, positive.

    Returns:
        :math:`\sigma`.

    Example:
        >>> round(norm_moment_bound(SymmetricPareto(3.0), 1.0, 4), 6)
        6.0
    """
    p = _positive("p", p)
    if p > 2:
        raise ValueError(f"p must be at most 2 for this bound, got {p!r}")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be a positive int, got {dim!r}")
    if not noise.finite_moment(p):
        raise ValueError(f"{noise!r} has no finite moment of order p={p}")
    return (dim * noise.abs_moment(p)) ** (1 / p)
