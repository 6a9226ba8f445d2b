"""Running dattri's TRAK (optional extra ``compare``) on our models, imported lazily."""

from __future__ import annotations

from unittest import mock

import numpy as np
import torch
from torch import Tensor, nn

from ..gradients import margin


def available() -> bool:
    try:
        import dattri  # noqa: F401
    except ImportError:
        return False
    return True


def margin_fns(model: nn.Module, stable: bool = True):
    """(margin_fn, prob_fn) in dattri's ``(params, (x, y))`` form for one example.

    ``stable``: the margin ``l_y - logsumexp_{c != y} l_c`` (:func:`trak_theory.gradients.margin`,
    the output function of this package and of traker). Otherwise ``log p - log(1 - p)`` with
    ``log p = -CE``, the same function written through ``p``: in float32 ``1 - p`` rounds to 0
    once the margin exceeds about 17, the margin becomes ``inf`` and its gradient non-finite;
    after dattri's ``nan_to_num`` such targets got all-zero scores in lds-digits (LDS
    undefined).
    """
    ce = nn.CrossEntropyLoss()

    def margin_fn(params, data):
        image, label = data
        out = torch.func.functional_call(model, params, image.unsqueeze(0))
        if stable:
            return margin(out[0], label)
        logp = -ce(out, label.unsqueeze(0))
        return logp - torch.log(1 - torch.exp(logp))

    def prob_fn(params, data):
        image, label = data
        out = torch.func.functional_call(model, params, image.unsqueeze(0))
        return torch.exp(-ce(out, label.unsqueeze(0)))

    return margin_fn, prob_fn


def dattri_scores_for(
    model: nn.Module,
    states: list[dict[str, Tensor]],
    x: Tensor,
    y: Tensor,
    xt: Tensor,
    yt: Tensor,
    k: int,
    model_counts: list[int],
    batch_size: int = 100,
    regularization: float = 0.0,
    stable_margin: bool = True,
) -> dict[int, np.ndarray]:
    """dattri 0.3's ``TRAKAttributor`` scores, (targets, train), for the first J models.

    Settings: CPU, its default projector (``random_project``, seed 0, per-model
    ``ensemble_id``), its default ridge 0 unless ``regularization`` is given, ``p`` as the
    correct-class probability and the margin as the output function (see :func:`margin_fns`;
    ``stable_margin=False`` uses the ``log p - log(1 - p)`` form, which overflows on confident
    examples).
    One attributor per J (dattri ensembles over all the checkpoints it is given). The
    projector arguments are passed in full every time: dattri updates a module-level default
    dict in place, so leftovers of an earlier call would otherwise leak in.
    """
    from dattri.algorithm.trak import TRAKAttributor
    from dattri.task import AttributionTask

    margin_fn, prob_fn = margin_fns(model, stable_margin)

    def loader(a, b):
        ds = torch.utils.data.TensorDataset(a, b)
        return torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=False)

    def one(jj: int) -> np.ndarray:
        task = AttributionTask(loss_func=margin_fn, model=model, checkpoints=list(states[:jj]))
        att = TRAKAttributor(
            task=task,
            correct_probability_func=prob_fn,
            device="cpu",
            regularization=regularization,
            projector_kwargs={
                "device": "cpu",
                "proj_dim": k,
                "proj_seed": 0,
                "proj_max_batch_size": 32,
            },
        )
        att.cache(loader(x, y))
        sc = att.attribute(loader(xt, yt))  # (train, targets)
        return np.array(sc.detach(), dtype=np.float64).T

    # dattri draws a progress bar per pass over each loader: silence it for these calls
    import dattri.algorithm.trak as dattri_trak

    with mock.patch.object(dattri_trak, "tqdm", lambda it, *a, **kw: it):
        return {jj: one(jj) for jj in model_counts}
