r"""Polar factor, fractional spectral powers and SPD matrix functions.

- :func:`msign`: the polar factor :math:`UV^\top` (matrix sign for symmetric input) by
  Newton-Schulz with a named coefficient table (:data:`NS_TABLES`: ``"muon"``,
  ``"polar_express"``, ``"rms5"``), exactly by SVD/eigh, or ``"auto"``; batched.
- :func:`newton_schulz`: the iteration itself, for any list of quintic coefficients;
  :func:`newton_schulz_combination`: a weighted sum of its iterates (a spectral function
  fitted through :func:`newton_schulz_spectra`, e.g. a fractional power without an SVD).
- :func:`spectral_power`: :math:`U\,\mathrm{diag}((s/\|G\|_F)^a)\,V^\top` for ``a`` in [0, 1]
  (0: msign, 1: ``G / ||G||_F``), by SVD or by matmul-only iterations.
- :func:`sqrtm`, :func:`inv_sqrtm`, :func:`powm_sym`, :func:`logm_sym`, :func:`expm_sym`:
  functions of symmetric (positive-definite) matrices via ``eigh``.

Example:
    >>> import torch
    >>> from shared_core.polar import msign, spectral_power
    >>> G = torch.randn(128, 64, generator=torch.Generator().manual_seed(0))
    >>> Q = msign(G)                      # Polar Express, 6 steps, float32 on the CPU
    >>> E = msign(G, method="svd")        # exact
    >>> bool((Q - E).norm() / E.norm() < 0.01)
    True
    >>> torch.equal(spectral_power(G, 0.0), E)
    True
"""

from __future__ import annotations

from ._svd import default_rtol, significant
from .coefficients import (
    DEFAULT_STEPS,
    DEFAULT_TABLE,
    NS_TABLES,
    NSTable,
    coefficients_for,
    get_table,
    minimax_odd_quintic,
    polar_express_coefficients,
    table_info,
)
from .fractional import spectral_power
from .msign import METHODS, auto_method, eigh_sign, gram_polar, msign, svd_polar
from .newton_schulz import (
    checked_table,
    newton_schulz,
    newton_schulz_combination,
    newton_schulz_spectra,
    normalize_frobenius,
)
from .spd import expm_sym, inv_sqrtm, logm_sym, powm_sym, sqrtm

__all__ = [
    "DEFAULT_STEPS",
    "DEFAULT_TABLE",
    "METHODS",
    "NS_TABLES",
    "NSTable",
    "auto_method",
    "checked_table",
    "coefficients_for",
    "default_rtol",
    "eigh_sign",
    "expm_sym",
    "get_table",
    "gram_polar",
    "inv_sqrtm",
    "logm_sym",
    "minimax_odd_quintic",
    "msign",
    "newton_schulz",
    "newton_schulz_combination",
    "newton_schulz_spectra",
    "normalize_frobenius",
    "polar_express_coefficients",
    "powm_sym",
    "significant",
    "spectral_power",
    "sqrtm",
    "svd_polar",
    "table_info",
]
