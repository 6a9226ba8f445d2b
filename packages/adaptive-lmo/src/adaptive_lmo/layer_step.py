"""One matrix layer's work item for one ``AdaptiveLMO.step``.

:meth:`adaptive_lmo.AdaptiveLMO.step` builds a :class:`LayerStep` per matrix parameter with
a gradient; the exponent controller (:mod:`adaptive_lmo.controller`) reads and fills it on
criterion steps and the update (``AdaptiveLMO._apply``) consumes it. It lives for one step
only: what must survive a step sits in the optimizer's ``state[p]``, a plain dict, so that
``state_dict()`` round trips stay torch.optim's.

The statistics the criterion scores sit in a separate :class:`CriterionInputs`, present only
on the steps where the layer's exponent is chosen, so that an a = 0 step carries nothing it
does not use. Shapes below: a matrix view ``(*batch, m, n)`` with thin rank ``r = min(m, n)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from .fractional import SVDFactors

__all__ = ["SYNCED_STATS", "CriterionInputs", "LayerStep"]

#: The statistics :meth:`~adaptive_lmo.controller.ExponentController._sync_curvatures`
#: averages over ranks; each has a ``<name>_shape`` field that every rank agrees on.
SYNCED_STATS: tuple[str, ...] = ("c", "b", "bq")


@dataclass(slots=True)
class CriterionInputs:
    """What the criterion scores for one layer on a step that chooses its exponent.

    Built by ``_prepare_criterion`` on every due step (the shapes, ``s`` and ``d``); the
    statistics are None where nothing was recorded (or, after the all-reduce, where no rank
    recorded them).
    """

    # singular values of the scored direction, (*batch, r): this step's decomposition, or
    # the one kept from the previous step with stats="next_batch"
    s: Tensor
    # alignments u_i^T ghat v_i, (*batch, r), with precondition="adam"; None otherwise (d = s)
    d: Tensor | None
    # the all-reduce's fixed shape of c: (*batch, r, r) for kfac, (numel(s),) for "input"
    c_shape: tuple[int, ...]
    # the all-reduce's shape of b, (*batch, r, r); None with curvature="input"
    b_shape: tuple[int, ...] | None
    # the all-reduce's shape of bq, (*batch, 2); None with curvature="input"
    bq_shape: tuple[int, ...] | None
    # the output rows came from fisher_backward (sampled targets), not the user's backward
    fisher: bool = False
    # input factor: V^T Sigma V, (*batch, r, r), for kfac; the diagonal energies along V,
    # flattened to (numel(s),), for "input"; set when input rows were recorded
    c: Tensor | None = None
    # output factor U^T B U, (*batch, r, r); kfac with recorded output gradients only
    b: Tensor | None = None
    # (mean |z|^4 over rows, row count) of the output rows, (*batch, 2), float64 after a
    # sync: the Ledoit-Wolf weight's inputs; set with b
    bq: Tensor | None = None
    # the recorded output-gradient rows in the U basis, (..., rows, r); set with b (this
    # rank's own rows, not synchronised), read by the switch test and the gain bound
    bz: Tensor | None = None
    # the recorded input rows, (..., rows, n); set with c (this rank's own rows)
    x: Tensor | None = None
    # the right factors V^T the statistics were taken in, (*batch, r, n); set with x
    Vh: Tensor | None = None
    # the curvature choose_exponent received: b * c for kfac, else diag(c) flattened; set by
    # _choose_exponent when it reaches the criterion (read by the exact-polar rule)
    curv: Tensor | None = None
    # the left factors U the statistics were taken in, (*batch, m, r), when known (the
    # mixture rule rebuilds the scored direction from U, s, V^T)
    U: Tensor | None = None
    # the output factor in curv after shrinkage, (*batch, r, r); None without output rows
    # (set with curv; read by the mixture rule, which needs both factors apart)
    b_used: Tensor | None = None
    # (a, weights, loss) of the Newton-Schulz mixture scored for exponent a on this step
    # (set by the cost rule or the mixture rule, whichever scores it first)
    mixture: tuple[float, Tensor, float] | None = None
    # the cost rule kept an exponent whose resolved gain is below min_gain because its
    # mixture keeps a positive realised gain (the layer pays no SVD per step)
    cheap_keep: bool = False


@dataclass(slots=True)
class LayerStep:
    """One matrix layer's inputs and intermediate results within one ``step``."""

    # the parameter being updated (a key of the optimizer's state)
    p: Tensor
    # its param group (options as validated at this step)
    group: dict[str, Any]
    # the direction: momentum or Adam's ratio in the matrix view, (*batch, m, n), set always
    P: Tensor
    # the gradient estimate the alignments use: the bias-corrected first moment with
    # precondition="adam", else P itself
    ghat: Tensor
    # the matrix view's shape (*batch, m, n) (routing.matrix_shape)
    shape: tuple[int, ...]
    # the layer's exponent is chosen on this step (its statistics are due)
    due: bool
    # stats="next_batch": this step's factors are kept for the next step's choice
    snap: bool
    # this step's decomposition of P, reused by the update's SVD route; set by
    # _prepare_criterion (criterion steps only, and not every route takes one), else None
    factors: SVDFactors | None = None
    # the criterion's inputs; set by _prepare_criterion when due, None otherwise
    crit: CriterionInputs | None = None
