"""Running MadryLab's traker (optional extra ``compare``) on our models, imported lazily."""

from __future__ import annotations

import logging
import tempfile

import numpy as np
import torch
from torch import Tensor, nn


def available() -> bool:
    try:
        import trak  # noqa: F401
    except ImportError:
        return False
    return True


def traker_matrix(p: int, k: int, model_id: int, seed: int = 0) -> Tensor:
    """The (p, k) Rademacher matrix traker's BasicProjector uses for ``model_id``.

    BasicProjector regenerates its matrix in column blocks of 100 on every call, so the matrix
    is read off by projecting the identity: row r of ``project(I)`` is row r of the matrix.
    """
    from trak.projectors import BasicProjector, ProjectionType

    proj = BasicProjector(
        grad_dim=p, proj_dim=k, seed=seed, proj_type=ProjectionType.rademacher, device="cpu"
    )
    return proj.project(torch.eye(p), model_id=model_id).detach().clone()


def traker_scores_for(
    model: nn.Module,
    states: list[dict[str, Tensor]],
    x: Tensor,
    y: Tensor,
    xt: Tensor,
    yt: Tensor,
    k: int,
    model_counts: list[int],
    batch_size: int = 100,
    lambda_reg: float = 0.0,
) -> dict[int, np.ndarray]:
    """traker's scores, (targets, train), for the first J models for each J in model_counts.

    Settings: CPU, float32 (``use_half_precision=False``), BasicProjector (Rademacher, seed 0),
    the image-classification margin, its default ridge 0 unless ``lambda_reg`` is given, and
    a fresh save folder with ``load_from_save_dir=True`` (``False`` fails on a fresh folder).
    """
    from trak import TRAKer
    from trak.projectors import BasicProjector, ProjectionType

    p = sum(q.numel() for q in model.parameters())
    folder = tempfile.mkdtemp(prefix="traker_")
    proj = BasicProjector(
        grad_dim=p, proj_dim=k, seed=0, proj_type=ProjectionType.rademacher, device="cpu"
    )
    tr = TRAKer(
        model=model,
        task="image_classification",
        train_set_size=len(x),
        save_dir=folder,
        device="cpu",
        proj_dim=k,
        projector=proj,
        use_half_precision=False,
        logging_level=logging.ERROR,
        lambda_reg=lambda_reg,
    )
    jmax = max(model_counts)
    for j, st in enumerate(states[:jmax]):
        tr.load_checkpoint(st, model_id=j)
        for s in range(0, len(x), batch_size):
            tr.featurize(
                batch=(x[s : s + batch_size], y[s : s + batch_size]),
                inds=np.arange(s, min(len(x), s + batch_size)),
            )
    tr.finalize_features()
    for j, st in enumerate(states[:jmax]):
        # traker 0.3.2 bug: finalize_features frees the projector's matrix, and a one-block
        # projector (k <= 100) regenerates it only when the model id changes, so scoring the
        # last featurised model (one model: always) raised AttributeError 'proj_matrix'.
        # Resetting the cached id makes traker regenerate the same matrix on its own path.
        if not getattr(proj, "proj_matrix_available", True):
            proj.model_id = -1
        tr.start_scoring_checkpoint("targets", st, model_id=j, num_targets=len(xt))
        for s in range(0, len(xt), batch_size):
            tr.score(
                batch=(xt[s : s + batch_size], yt[s : s + batch_size]),
                inds=np.arange(s, min(len(xt), s + batch_size)),
            )
    out = {}
    for jj in model_counts:
        sc = tr.finalize_scores("targets", model_ids=list(range(jj)))
        out[jj] = np.array(sc, dtype=np.float64).T
    return out
