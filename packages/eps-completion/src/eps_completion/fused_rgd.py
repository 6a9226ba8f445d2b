r"""The two Ω-dependent products of Riemannian GD, on NumPy/SciPy (uniform weights, CPU).

Each iteration of :func:`eps_completion.solvers.rgd` needs, at :math:`X = USV^\top`, the
value f and :math:`(GV, G^\top U)` for the Euclidean gradient
:math:`G = S_\Omega + \varepsilon^2 X` with
:math:`S_\Omega = \mathcal P_\Omega((1-\varepsilon^2)X - B)`, and the curvature
:math:`\|\mathcal A_\varepsilon(L_\xi R_\xi^\top)\|^2` along the tangent step. The
reference route (torch) gathers factor rows on Ω six times and scatters twice per
iteration; here the entries of X on Ω take 2 gathers and the two products with
:math:`S_\Omega` go through :class:`~eps_completion.omega.OmegaOps`' fixed CSR structure,
the curvature 2 more gathers; all |Ω|-sized work arrays are allocated once. Same formulas
as :func:`eps_completion.solvers._egrad_products` and
:func:`eps_completion.objective.quadratic_form`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from shared_core.manifolds import SVDPoint

from .omega import OmegaOps, dot
from .problem import Observations

__all__ = ["RgdProducts"]


class RgdProducts:
    """``egrad`` and ``curvature`` of the ε-surrogate on the observed set of ``obs``."""

    def __init__(self, obs: Observations, eps: float):
        self.om = OmegaOps(obs)
        self.e2 = eps * eps

    def egrad(self, x: SVDPoint) -> tuple[float, Tensor, Tensor]:
        """``(f, G V, G^T U)`` at ``X = U S V^T``."""
        om, e2 = self.om, self.e2
        un, sn, vn = (t.numpy() for t in x)
        us = un @ sn
        x = om.entries(us, vn, "x")
        res = np.subtract(x, om.b, out=om.buffer("res"))
        # ||U S V^T||_F = ||S||_F (orthonormal U, V)
        f = 0.5 * dot(res, res) + 0.5 * e2 * (float(np.vdot(sn, sn)) - dot(x, x))
        vals = np.multiply(x, -e2, out=om.values)
        vals += res
        gv = om.times(vn)
        gtu = om.times_t(un)
        if e2 != 0.0:
            gv += e2 * us
            gtu += e2 * (vn @ sn.T)
        return f, torch.from_numpy(gv), torch.from_numpy(gtu)

    def curvature(self, lf: Tensor, rf: Tensor) -> float:
        """:math:`\\|\\mathcal A_\\varepsilon(L R^\\top)\\|^2`."""
        ln, rn = lf.numpy(), rf.numpy()
        z = self.om.entries(ln, rn, "z")
        on = dot(z, z)
        total = float(np.vdot(ln.T @ ln, rn.T @ rn))
        return on + self.e2 * (total - on)
