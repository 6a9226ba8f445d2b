"""The BoTorch GP the policies sample from: known hyperparameters or fitted by marginal likelihood.

* :class:`KernelSpec` given (the theory's setting: the prior is known): a ``SingleTaskGP``
  with zero mean, ``ScaleKernel(RBF | Matern)`` at the given lengthscale and output scale,
  fixed noise variance, no input or outcome transform; nothing is fitted.
* no spec (practice): BoTorch's default ``SingleTaskGP`` (inputs normalised to the bounds,
  outputs standardised, hyperparameter priors) fitted with ``fit_gpytorch_mll``.

Noiseless observations use a fixed noise variance :data:`NOISELESS_JITTER` (the model is
never told "zero": the Gram matrix would be singular at repeated queries). In the fitted model
outputs are standardised, and gpytorch floors a fixed noise at 1e-6 in those units (it warns),
so there the jitter is 1e-6 times the sample variance of the observations.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import lru_cache

import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel
from gpytorch.means import ZeroMean
from gpytorch.mlls import ExactMarginalLogLikelihood

__all__ = ["NOISELESS_JITTER", "KernelSpec", "build_model", "check_training_data"]

#: fixed noise variance of the model when the observations are exact (``noise=0``).
NOISELESS_JITTER = 1e-6


@dataclass(frozen=True)
class KernelSpec:
    """A known GP prior: ``outputscale * k(x / lengthscale)``, ``name`` in ``se``/``matern52``/
    ``matern32``."""

    name: str = "se"
    lengthscale: float = 0.2
    outputscale: float = 1.0

    def __post_init__(self):
        if self.name not in ("se", "matern52", "matern32"):
            raise ValueError(f"kernel name must be se, matern52 or matern32, got {self.name!r}")
        for k in ("lengthscale", "outputscale"):
            v = getattr(self, k)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{k} must be a positive finite float, got {v!r}")

    def module(self, dim: int) -> ScaleKernel:
        """A gpytorch ``ScaleKernel`` with these (fixed) hyperparameters, float64.

        Cached per spec (the module is never trained, so models may share it).
        """
        return _kernel_module(self, dim)

    def _make(self) -> ScaleKernel:
        if self.name == "se":
            base = RBFKernel()
        else:
            base = MaternKernel(nu=2.5 if self.name == "matern52" else 1.5)
        k = ScaleKernel(base).to(torch.float64)
        k.base_kernel.lengthscale = self.lengthscale
        k.outputscale = self.outputscale
        return k

    def matrix(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """The dense kernel matrix ``k(x, y)`` (float64)."""
        with torch.no_grad():
            x = x.to(torch.float64)
            return self.module(x.shape[-1])(x, x if y is None else y.to(torch.float64)).to_dense()


@lru_cache(maxsize=64)
def _kernel_module(spec: KernelSpec, dim: int) -> ScaleKernel:
    del dim  # stationary kernels without ARD: one module serves every dimension
    return spec._make()


def check_training_data(x: torch.Tensor, y: torch.Tensor) -> None:
    """Refuse to fit a GP to non-finite or mis-shaped data (a clear error, never a silent NaN)."""
    if x.ndim != 2 or y.ndim != 2 or y.shape[1] != 1 or x.shape[0] != y.shape[0]:
        raise ValueError(f"training data shapes {tuple(x.shape)} and {tuple(y.shape)} mismatch")
    if not torch.isfinite(x).all():
        raise ValueError("training inputs contain NaN or inf")
    if not torch.isfinite(y).all():
        raise ValueError("observations contain NaN or inf: refusing to fit a GP to them")


def build_model(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    bounds: torch.Tensor,
    noise_var: float | None,
    kernel: KernelSpec | None = None,
) -> SingleTaskGP:
    """A BoTorch ``SingleTaskGP`` on the data, in eval mode.

    Args:
        x: inputs ``(n, d)``; y: observations ``(n, 1)`` (finite).
        bounds: ``(2, d)`` box (used to normalise inputs of the fitted model).
        noise_var: the known noise variance (``0`` means noiseless: the fixed jitter is used);
            ``None`` with ``kernel=None`` learns it.
        kernel: known prior, or ``None`` to fit hyperparameters.
    """
    check_training_data(x, y)
    x, y = x.to(torch.float64), y.to(torch.float64)
    yvar = None
    if noise_var is not None:
        yvar = torch.full_like(y, max(float(noise_var), NOISELESS_JITTER))
    if kernel is not None:
        if yvar is None:
            raise ValueError("a known kernel needs a known noise_var")
        model = SingleTaskGP(
            x,
            y,
            train_Yvar=yvar,
            covar_module=kernel.module(x.shape[-1]),
            mean_module=ZeroMean(),
            outcome_transform=None,
        )
    else:
        model = SingleTaskGP(
            x,
            y,
            train_Yvar=yvar,
            input_transform=Normalize(x.shape[-1], bounds=bounds.to(torch.float64)),
            outcome_transform=Standardize(1),
        )
        mll = ExactMarginalLogLikelihood(model.likelihood, model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit_gpytorch_mll(mll)
    return model.eval()
