r"""Mirror maps and Bregman divergences, for mirror descent and FTRL.

A :class:`MirrorMap` bundles a potential :math:`\psi`, the maps :math:`\nabla\psi` and
:math:`\nabla\psi^* = (\nabla\psi)^{-1}`, the Bregman divergence
:math:`D_\psi(x, y) = \psi(x) - \psi(y) - \langle\nabla\psi(y), x - y\rangle`, the Bregman
projection onto its domain, and the mirror step
:math:`x^+ = \Pi(\nabla\psi^*(\nabla\psi(x) - \eta g))`.

- :class:`Euclidean` (optionally on a :class:`Ball` or :class:`Box`): projected gradient descent.
- :class:`NegEntropy` on the probability simplex: exponentiated gradient, KL divergence.
- :class:`PNorm`: :math:`\tfrac12\|x\|_p^2`, :math:`1 < p \le 2`, optionally on an l_p ball.

The last axis is the vector; leading axes are a batch.

Example:
    >>> import torch
    >>> from shared_core.mirror import get_mirror
    >>> m = get_mirror("entropy")
    >>> x = torch.full((4,), 0.25)
    >>> x = m.step(x, torch.tensor([1.0, 0.0, 0.0, 0.0]), lr=0.5)
    >>> round(float(x.sum()), 6), bool(x[0] < x[1])
    (1.0, True)
"""

from __future__ import annotations

import torch.serialization as _torch_serialization

from .base import MirrorMap
from .domains import Ball, Box, Domain
from .entropy import NegEntropy
from .euclidean import Euclidean
from .factory import MIRRORS, get_mirror
from .pnorm import PNorm

# Optimizers keep their mirror map in ``param_groups``, so it lands in ``state_dict()``.
# torch.load defaults to ``weights_only=True`` and refuses unknown classes; these are plain
# data (numbers and tensors), so allowlisting them lets such checkpoints load as usual.
_torch_serialization.add_safe_globals([Ball, Box, Euclidean, NegEntropy, PNorm])

__all__ = [
    "MIRRORS",
    "Ball",
    "Box",
    "Domain",
    "Euclidean",
    "MirrorMap",
    "NegEntropy",
    "PNorm",
    "get_mirror",
]
