"""Running dattri's TRAK (optional extra ``compare``) on our models, imported lazily."""

from __future__ import annotations

from unittest import mock

import numpy as np
import torch
from torch import Tensor, nn


def available() -> bool:
    try:
        import dattri  # noqa: F401
    except ImportError:
        return False
    return True


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
) -> dict[int, np.ndarray]:
    """dattri 0.3's ``TRAKAttributor`` scores, (targets, train), for the first J models.

    Settings: CPU, its default projector (``random_project``, seed 0, per-model
    ``ensemble_id``), its default ridge 0 unless ``regularization`` is given, the margin
    ``log p - log(1 - p)`` as the output function and ``p`` as the correct-class probability.
    One attributor per J (dattri ensembles over all the checkpoints it is given). The
    projector arguments are passed in full every time: dattri updates a module-level default
    dict in place, so leftovers of an earlier call would otherwise leak in.
    """
    from dattri.algorithm.trak import TRAKAttributor
    from dattri.task import AttributionTask

    ce = nn.CrossEntropyLoss()

    def margin_fn(params, data):
        image, label = data
        out = torch.func.functional_call(model, params, image.unsqueeze(0))
        logp = -ce(out, label.unsqueeze(0))
        return logp - torch.log(1 - torch.exp(logp))

    def prob_fn(params, data):
        image, label = data
        out = torch.func.functional_call(model, params, image.unsqueeze(0))
        return torch.exp(-ce(out, label.unsqueeze(0)))

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
