"""Triton kernels of diloco-ef, each beside its plain-torch reference (shared-core's pattern)."""

from __future__ import annotations

from .quantize import stochastic_quantize, stochastic_quantize_reference, stochastic_quantize_triton

__all__ = ["stochastic_quantize", "stochastic_quantize_reference", "stochastic_quantize_triton"]
