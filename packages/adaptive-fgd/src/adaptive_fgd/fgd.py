r"""Functional gradient descent whose gradient representation adapts to a relative-error target.

One step at iterate :math:`f_t` (values :math:`f_t(x_i)` on the sample, coefficients over the
family's list):

1. exact :math:`L^2(\mu)` gradient on the sample: :math:`g_i = \partial_u\ell(f_t(x_i), y_i)`;
2. the sample is split once into *fit* points and *check* points (held out from every fit);
3. **adaptive rule** (:func:`refine_until`): starting at size :math:`m`, fit
   :math:`\hat g_m` on the fit points; estimate :math:`e_m = \|\hat g_m - g\| / \|g\|` on the
   check points; while :math:`e_m > \delta`, grow :math:`m \leftarrow \lceil \gamma m\rceil`
   (new basis functions placed by the residual); at the cap with :math:`e_m > \delta`, raise
   :class:`RepresentationCapError` naming the achieved error;
4. :math:`f_{t+1} = f_t - \eta\hat g_m` (coefficients merged: see
   :mod:`adaptive_fgd.representations`);
5. **coarsen when slack**: if :math:`e_m \le \kappa\delta` the next step starts at
   :math:`\max(m_0, \lfloor m/\gamma\rfloor)`, else at :math:`m`.

:math:`\eta` defaults to :func:`adaptive_fgd.functional.step_size` (the step that keeps the
descent guarantee for any :math:`\hat g` meeting the condition). ``adaptive=False`` gives the
fixed-size baseline (same fit, same step, size never changes, condition only recorded).

``norm="rkhs"`` runs the same loop in the RKHS of a :class:`KernelCentres` family instead
(:mod:`adaptive_fgd.rkhs`): the gradient is the kernel expansion over the whole sample, the
representation its orthogonal projection on the centres, and the condition
:math:`\|\hat g - g\|_{\mathcal H} \le \delta\|g\|_{\mathcal H}` is checked exactly (no
points held out); the default step uses the smoothness :math:`L\,\lambda_{\max}(K/n)` bounded by
:func:`adaptive_fgd.rkhs.operator_bound`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .functional import check_delta, l2_gradient, relative_error, step_size
from .losses import check_loss, loss_value, smoothness
from .representations import FeatureFamily, KernelCentres, NestedRidge, gaussian_kernel
from .rkhs import operator_bound, refine_rkhs

__all__ = ["AdaptiveFGD", "FitResult", "RepresentationCapError", "StepRecord", "refine_until"]


class RepresentationCapError(RuntimeError):
    """The representation reached its size cap without meeting the relative-error target."""

    def __init__(self, achieved: float, delta: float, cap: int, step: int | None = None) -> None:
        where = "" if step is None else f" at step {step}"
        super().__init__(
            f"representation cap {cap} reached{where} (the family cannot grow further) with "
            f"relative gradient error "
            f"{achieved:.4g} > delta = {delta:.4g}: raise the cap, pick a richer family, or "
            f"a larger delta"
        )
        self.achieved = achieved
        self.delta = delta
        self.cap = cap


@dataclass
class FitResult:
    """Outcome of :func:`refine_until`."""

    coefficients: torch.Tensor  #: ``(size, k)``
    size: int
    rel_error: float  #: on the check points
    tries: int  #: fits made
    met: bool  #: ``rel_error <= delta``


@dataclass
class StepRecord:
    """What one FGD step records: the guarantee's precondition next to its effect."""

    step: int
    loss: float
    rel_error: float  #: estimate on held-out check points (what the rule used); exact for rkhs
    rel_error_full: float  #: over the whole sample measure (diagnostic); = rel_error for rkhs
    #: :math:`\|g_t\|^2` at the iterate the step started from (:math:`L^2(\mu_n)` or RKHS)
    grad_norm_sq: float
    size: int
    lr: float
    seconds: float  #: cumulative wall time of the steps
    tries: int
    met: bool


def refine_until(
    family: FeatureFamily,
    solver: NestedRidge,
    x_fit: torch.Tensor,
    g_fit: torch.Tensor,
    g_check: torch.Tensor,
    phi_check: Callable[[int], torch.Tensor],
    delta: float,
    size: int,
    *,
    growth: float = 2.0,
    generator: torch.Generator | None = None,
    adaptive: bool = True,
) -> FitResult:
    r"""Grow the representation until the held-out relative error is at most ``delta``.

    Args:
        family: the feature family (grown in place when more basis functions are needed).
        solver: a :class:`~adaptive_fgd.representations.NestedRidge` over the fit points; the
            columns the family gains are appended to it here.
        x_fit: fit points (for placing new basis functions).
        g_fit, g_check: exact gradient values ``(n, k)`` at fit / check points.
        phi_check: ``m -> features (n_check, m)`` at the check points (a caller may cache).
        delta: the target :math:`\delta \in (0, 1)`.
        size: the size to try first.
        growth: factor :math:`\gamma > 1` between tries.
        generator: random source for placing basis functions.
        adaptive: if False, fit once at ``size`` and report (the fixed baseline).

    Returns:
        A :class:`FitResult`; ``met`` is False only when the cap was reached, the family could
        not grow any more (e.g. every fit point is already a centre), or ``adaptive=False``.
    """
    delta = check_delta(delta)
    if not growth > 1:
        raise ValueError(f"growth must be > 1, got {growth!r}")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    m = max(1, min(int(size), family.cap))
    tries, beta, m_prev = 0, None, 0
    while True:
        if family.size < m:
            resid = g_fit
            if beta is not None:
                resid = g_fit - solver.phi[:, :m_prev] @ beta
            family.grow(m, x_fit, resid, gen)
            m = min(m, family.size)
        if solver.size < family.size:
            solver.extend(family.features(x_fit, family.size, start=solver.size))
        beta = solver.solve(m, g_fit)
        err = relative_error(phi_check(m) @ beta, g_check)
        tries += 1
        if err <= delta or not adaptive or m >= family.cap or m <= m_prev:
            # m <= m_prev: the family could not grow (e.g. every fit point is a centre)
            return FitResult(beta, m, err, tries, err <= delta)
        m_prev = m
        m = min(family.cap, max(m + 1, math.ceil(growth * m)))


class AdaptiveFGD:
    r"""FGD on :math:`R(f) = \frac1n\sum_i \ell(f(x_i), y_i)` in :math:`L^2(\mu_n)`.

    Args:
        family: a :class:`~adaptive_fgd.representations.FeatureFamily` (its ``cap`` bounds the
            representation and the iterate).
        loss: ``"squared"``, ``"logistic"`` (labels in [-1, +1]: ±1, or the expected label
            :math:`2p-1` of a point with conditional probability :math:`p`) or ``"softmax"``
            (multiclass: ``y`` one probability vector per point, one-hot for hard labels; the
            iterate has ``k`` outputs, the logits).
        delta: relative-error target :math:`\delta\in(0,1)`.
        lr: step size; default :math:`(1-\delta)/(L(1+\delta)^2)` with :math:`L` the loss's
            smoothness.
        adaptive: False gives fixed-size FGD at ``start_size``.
        start_size: first representation size (and the floor when coarsening).
        growth: refinement factor :math:`> 1`.
        coarsen_below: coarsen when the error is at most this fraction of ``delta``, in [0, 1).
        holdout: fraction of the sample held out as check points, in (0, 1).
        ridge: relative ridge of each fit.
        on_cap: ``"raise"`` (default) or ``"record"`` (continue, with ``met=False`` in the
            history) when the cap cannot meet ``delta``.
        seed: seed of the split and of the basis placement.
        norm: ``"l2"`` (default: :math:`L^2(\mu_n)`, held-out check) or ``"rkhs"`` (the RKHS of
            a :class:`~adaptive_fgd.representations.KernelCentres` family, exact check; the
            default ``lr`` is then set by ``fit`` from the sample's kernel matrix; ``holdout``
            and ``ridge`` are unused). The sample's ``n x n`` kernel matrix is kept.

    Example:
        >>> import torch
        >>> from adaptive_fgd import AdaptiveFGD, RandomFourierFeatures
        >>> x = torch.linspace(-1, 1, 200, dtype=torch.float64)[:, None]
        >>> fgd = AdaptiveFGD(RandomFourierFeatures(1, 0.3, cap=256), delta=0.3)
        >>> fgd.fit(x, torch.sin(3 * x), steps=20).history[-1].loss < 1e-3
        True
    """

    def __init__(
        self,
        family: FeatureFamily,
        *,
        loss: str = "squared",
        delta: float = 0.3,
        lr: float | None = None,
        adaptive: bool = True,
        start_size: int = 8,
        growth: float = 2.0,
        coarsen_below: float = 0.5,
        holdout: float = 0.2,
        ridge: float = 1e-8,
        on_cap: str = "raise",
        seed: int = 0,
        norm: str = "l2",
    ) -> None:
        if not isinstance(family, FeatureFamily):
            raise ValueError(f"family must be a FeatureFamily, got {type(family).__name__}")
        self.loss = check_loss(loss)
        self.delta = check_delta(delta)
        if norm not in ("l2", "rkhs"):
            raise ValueError(f"norm must be 'l2' or 'rkhs', got {norm!r}")
        if norm == "rkhs" and not isinstance(family, KernelCentres):
            raise ValueError(
                f"norm='rkhs' needs a KernelCentres family (its kernel defines the RKHS), got "
                f"{type(family).__name__}"
            )
        self.norm = norm
        self._lr_given = lr is not None
        if lr is None:
            lr = step_size(smoothness(loss), self.delta)  # rkhs: replaced in fit
        if not (isinstance(lr, int | float) and math.isfinite(lr) and lr > 0):
            raise ValueError(f"lr must be finite and > 0, got {lr!r}")
        if isinstance(start_size, bool) or not isinstance(start_size, int) or start_size < 1:
            raise ValueError(f"start_size must be a positive int, got {start_size!r}")
        if start_size > family.cap:
            raise ValueError(f"start_size {start_size} exceeds the family's cap {family.cap}")
        if not (growth > 1 and math.isfinite(growth)):
            raise ValueError(f"growth must be finite and > 1, got {growth!r}")
        if not (0 <= coarsen_below < 1):
            raise ValueError(f"coarsen_below must lie in [0, 1), got {coarsen_below!r}")
        if not (0 < holdout < 1):
            raise ValueError(f"holdout must lie in (0, 1), got {holdout!r}")
        if not (ridge >= 0 and math.isfinite(ridge)):
            raise ValueError(f"ridge must be finite and >= 0, got {ridge!r}")
        if on_cap not in ("raise", "record"):
            raise ValueError(f"on_cap must be 'raise' or 'record', got {on_cap!r}")
        self.family = family
        self.lr = float(lr)
        self.adaptive = adaptive
        self.start_size = start_size
        self.growth = float(growth)
        self.coarsen_below = float(coarsen_below)
        self.holdout = float(holdout)
        self.ridge = float(ridge)
        self.on_cap = on_cap
        self.seed = seed
        self.history: list[StepRecord] = []
        self.coefficients = torch.zeros(0, 1, dtype=torch.float64)
        self._data = None

    # ------------------------------------------------------------------ data
    def _set_data(self, x: torch.Tensor, y: torch.Tensor) -> None:
        x = torch.as_tensor(x, dtype=torch.float64)
        y = torch.as_tensor(y, dtype=torch.float64)
        if y.ndim == 1:
            y = y[:, None]
        if x.ndim != 2 or x.shape[1] != self.family.dim:
            raise ValueError(f"x must have shape (n, {self.family.dim}), got {tuple(x.shape)}")
        if x.shape[0] == 0:
            raise ValueError("the sample is empty: need at least two points (fit and check)")
        if y.ndim != 2 or y.shape[0] != x.shape[0]:
            raise ValueError(
                f"y must have shape ({x.shape[0]},) or ({x.shape[0]}, k), got {tuple(y.shape)}"
            )
        if x.shape[0] < 2:
            raise ValueError("need at least two points: one to fit and one to check")
        if not (torch.isfinite(x).all() and torch.isfinite(y).all()):
            raise ValueError("x and y must be finite")
        if self.loss == "logistic" and not bool((y.abs() <= 1).all()):
            top = float(y.abs().max())
            raise ValueError(f"the logistic loss takes labels in [-1, +1], got |y| up to {top}")
        if self.loss == "softmax":
            rows = y.sum(1)
            if (
                y.shape[1] < 2
                or bool((y < 0).any())
                or not torch.allclose(rows, torch.ones_like(rows), rtol=0, atol=1e-9 * y.shape[1])
            ):
                raise ValueError(
                    "the softmax loss takes one probability vector per point (y of shape (n, k), "
                    "k >= 2, entries >= 0, rows summing to 1; one-hot for hard labels)"
                )
        n = x.shape[0]
        gen = torch.Generator().manual_seed(self.seed)
        perm = torch.randperm(n, generator=gen)
        n_check = min(n - 1, max(1, round(self.holdout * n)))
        self._gen = gen
        self._x, self._y = x, y
        self._fit_idx, self._check_idx = perm[n_check:], perm[:n_check]
        self._f = torch.zeros_like(y)
        self._phi = torch.zeros(n, 0, dtype=torch.float64)
        self._solver = NestedRidge(self.ridge)
        self.coefficients = torch.zeros(0, y.shape[1], dtype=torch.float64)
        self._next_size = self.start_size
        self._elapsed = 0.0
        self.history = []
        if self.norm == "rkhs":
            fam = self.family
            assert isinstance(fam, KernelCentres)
            self._gram = gaussian_kernel(x, x, fam.bandwidth)
            self._op_bound = operator_bound(self._gram)
            if not self._lr_given:
                self.lr = step_size(smoothness(self.loss) * self._op_bound, self.delta)
        self._data = True

    def _phi_upto(self, m: int) -> torch.Tensor:
        have = self._phi.shape[1]
        if m > have:  # cache new columns only: the family is append-only
            new = self.family.features(self._x, m, start=have)
            self._phi = torch.cat([self._phi, new], dim=1)
        return self._phi[:, :m]

    # ------------------------------------------------------------------ steps
    def fit(
        self, x: torch.Tensor, y: torch.Tensor, steps: int, *, time_budget: float | None = None
    ):
        """Run ``steps`` FGD steps from :math:`f_0 = 0` (stop past ``time_budget`` seconds)."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps must be a non-negative int, got {steps!r}")
        self._set_data(x, y)
        for _ in range(steps):
            self.step()
            if time_budget is not None and self._elapsed >= time_budget:
                break
        return self

    def step(self) -> StepRecord:
        """One FGD step (see the module docstring); returns and records its :class:`StepRecord`."""
        if self._data is None:
            raise RuntimeError("call fit(x, y, steps) first (it sets the sample)")
        t0 = time.perf_counter()
        g = l2_gradient(self.loss, self._f, self._y)
        if self.norm == "rkhs":
            return self._step_rkhs(g, t0)
        fi, ci = self._fit_idx, self._check_idx
        res = refine_until(
            self.family,
            self._solver,
            self._x[fi],
            g[fi],
            g[ci],
            lambda m: self._phi_upto(m)[ci],
            self.delta,
            self._next_size,
            growth=self.growth,
            generator=self._gen,
            adaptive=self.adaptive,
        )
        ghat = self._phi_upto(res.size) @ res.coefficients
        return self._finish(
            res, ghat, t0, rel_full=relative_error(ghat, g), norm_sq=float((g**2).sum(1).mean())
        )

    def _step_rkhs(self, g: torch.Tensor, t0: float) -> StepRecord:
        # gradient in H_k: alpha = g / n over the whole sample; its values K alpha on the sample
        alpha = g / g.shape[0]
        values = self._gram @ alpha
        res = refine_rkhs(
            self.family,  # type: ignore[arg-type]  (checked in __init__)
            self._x,
            self._phi_upto,
            alpha,
            values,
            self.delta,
            self._next_size,
            growth=self.growth,
            generator=self._gen,
            adaptive=self.adaptive,
        )
        ghat = self._phi_upto(res.size) @ res.coefficients
        return self._finish(res, ghat, t0, rel_full=res.rel_error, norm_sq=res.norm_sq)

    def _finish(self, res, ghat: torch.Tensor, t0: float, *, rel_full: float, norm_sq: float):
        step_no = len(self.history)
        if self.adaptive and not res.met and self.on_cap == "raise":
            raise RepresentationCapError(res.rel_error, self.delta, res.size, step_no)
        m = res.size
        self._f = self._f - self.lr * ghat
        if self.coefficients.shape[0] < self.family.size:
            pad = self.family.size - self.coefficients.shape[0]
            self.coefficients = torch.cat(
                [self.coefficients, self._f.new_zeros(pad, self._f.shape[1])]
            )
        self.coefficients[:m] -= self.lr * res.coefficients
        loss = float(loss_value(self.loss, self._f, self._y).sum(1).mean())
        if not math.isfinite(loss):
            raise ValueError(
                f"non-finite loss {loss} at step {step_no}: lower lr or check the data"
            )
        if self.adaptive:
            slack = res.rel_error <= self.coarsen_below * self.delta
            self._next_size = max(self.start_size, int(m / self.growth)) if slack else m
        self._elapsed += time.perf_counter() - t0
        rec = StepRecord(
            step=step_no,
            loss=loss,
            rel_error=res.rel_error,
            rel_error_full=rel_full,
            grad_norm_sq=norm_sq,
            size=m,
            lr=self.lr,
            seconds=self._elapsed,
            tries=res.tries,
            met=res.met,
        )
        self.history.append(rec)
        return rec

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """:math:`f_T(x)`: one pass over the merged coefficients, ``(n, k)``."""
        x = torch.as_tensor(x, dtype=torch.float64)
        m = self.coefficients.shape[0]
        if m == 0:
            return torch.zeros(x.shape[0], max(1, self.coefficients.shape[1]), dtype=torch.float64)
        return self.family.features(x, m) @ self.coefficients

    @property
    def sample_values(self) -> torch.Tensor:
        """:math:`f_T(x_i)` on the sample, summed step by step (not from the coefficients)."""
        if self._data is None:
            raise RuntimeError("no sample yet: call fit first")
        return self._f.clone()

    @property
    def size(self) -> int:
        """Length of the merged representation of the iterate (at most the family's cap)."""
        return self.coefficients.shape[0]
