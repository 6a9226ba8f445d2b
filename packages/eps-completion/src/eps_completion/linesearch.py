r"""The exact step of Burer–Monteiro GD: the minimiser of a quartic in the step length.

Along a direction :math:`(D_L, D_R)` the factored iterate is
:math:`X(t) = X_0 + t X_1 + t^2 X_2`, so :math:`f(t) - f(0) = c_1 t + c_2 t^2 + c_3 t^3 + c_4 t^4`
(coefficients from :func:`eps_completion.objective.line_quartic` or the fused loop of
:mod:`eps_completion.fused_bm`); its derivative is a cubic whose positive real roots are
the candidate steps.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["quartic_argmin"]


def quartic_argmin(c: list[float]) -> float:
    """The positive minimiser of :math:`c_1 t + c_2 t^2 + c_3 t^3 + c_4 t^4` (``c_1 < 0``).

    The smallest positive real root of the derivative at which the quartic is lowest; 0 if
    the polynomial does not decrease for t > 0 (``c_1 >= 0``).
    """
    c1, c2, c3, c4 = c
    if not c1 < 0:
        return 0.0
    a = 4 * c4
    if a != 0.0 and math.isfinite(a):
        # np.roots' own construction (companion matrix of the monic cubic, then eigvals)
        # without its input trimming, which costs more than the 3 x 3 eigenproblem
        comp = np.array([[-3 * c3 / a, -2 * c2 / a, -c1 / a], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
        roots = np.linalg.eigvals(comp)
    else:
        roots = np.roots([a, 3 * c3, 2 * c2, c1])
    cands = [float(z.real) for z in roots if abs(z.imag) <= 1e-9 * (1 + abs(z)) and z.real > 0]
    if not cands:
        return 0.0
    val = [c1 * t + c2 * t**2 + c3 * t**3 + c4 * t**4 for t in cands]
    return cands[int(np.argmin(val))]
