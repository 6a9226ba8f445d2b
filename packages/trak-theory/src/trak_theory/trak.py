r"""TRAK end to end: featurise checkpoints blockwise (resumable), score with a default ridge,
ensemble over checkpoints.

For model j with parameters :math:`\theta_j` and projector :math:`P_j` (its own seed), the
train features are :math:`\Phi_j = [P_j^\top\nabla_\theta f(z_i;\theta_j)]_i` and the weights
:math:`q_{ij} = 1 - p(z_i;\theta_j)`. Per model,
:math:`\tau^{(j)}_{ti} = \phi_{t,j}^\top(\Phi_j^\top\Phi_j+\lambda_j I)^{-1}\phi_{i,j}\,q_{ij}`
with :math:`\lambda_j` from :func:`trak_theory.scores.default_ridge` unless given, and the
ensemble averages the kernel scores and the weights separately (as in the TRAK paper),
:math:`\tau_{ti} = \tfrac1J\sum_j\phi_{t,j}^\top A_j^{-1}\phi_{i,j}\cdot
\tfrac1J\sum_j q_{ij}`. The Gram matrix and the scores are accumulated over blocks of the
(memmapped) features, so memory is :math:`O(k^2 + \text{block}\cdot k + m\cdot n)`
whatever n is.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping

import numpy as np
import torch
from torch import Tensor, nn

from .fingerprint import checkpoint_fingerprint, tensor_fingerprint
from .gradients import (
    all_finite,
    binary_margin,
    check_differentiable,
    margin,
    out_to_loss,
    params_of,
    per_example_grads,
)
from .projector import IdentityProjector, Projector, SketchProjector
from .scores import default_ridge, kernel_solve
from .store import FeatureStore, MemoryStore

__all__ = ["TRAK"]


def _signature(model: nn.Module) -> list[list]:
    return [[n, list(p.shape)] for n, p in model.named_parameters() if p.requires_grad]


def _check_finite(x: Tensor, name: str) -> None:
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or inf")


def _n_classes(model: nn.Module, x: Tensor, output_fn) -> int | None:
    """The number of classes the labels index (the logits' width), for the multi-class margin;
    None for other output functions, whose labels are not class indices."""
    if output_fn is not margin:
        return None
    with torch.no_grad():
        out = model(x[:1])
    return int(out.shape[-1])


class TRAK:
    """TRAK attribution for one architecture and any number of checkpoints.

    Args:
        model: the network (checkpoints are loaded into it; it is put in ``eval()`` mode).
        train_x, train_y: the training set (inputs and labels).
        k: projection dimension (``None``: no projection, features are full gradients).
        kind: sketch distribution, ``"rademacher"`` or ``"gaussian"``.
        seed: base sketch seed; model ``j`` uses ``seed + j``.
        ridge: ``"auto"`` (:func:`~trak_theory.scores.default_ridge`) or a number >= 0.
        ridge_fraction: the effective-dimension cap of the auto ridge, as a fraction of n.
        batch_size: examples per vmap call and per stored block.
        save_dir: folder for memmapped features (fresh or previous run: resumes); ``None``
            keeps them in memory.
        output_fn: ``output_fn(model_output, label) -> scalar``; the margin by default.
        weight_fn: ``weight_fn(model, x, y) -> (n,)`` reweighting; ``1 - p`` by default.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(),
        ...                           torch.nn.Linear(8, 3))
        >>> x, y = torch.randn(40, 5), torch.randint(0, 3, (40,))
        >>> trak = TRAK(net, x, y, k=16)
        >>> trak.featurize(net.state_dict(), model_id=0)
        >>> trak.score(x[:4], y[:4]).shape
        torch.Size([4, 40])
    """

    def __init__(
        self,
        model: nn.Module,
        train_x: Tensor,
        train_y: Tensor,
        k: int | None,
        *,
        kind: str = "rademacher",
        seed: int = 0,
        ridge: float | str = "auto",
        ridge_fraction: float = 0.5,
        batch_size: int = 100,
        save_dir=None,
        output_fn: Callable[[Tensor, Tensor], Tensor] = margin,
        weight_fn: Callable[[nn.Module, Tensor, Tensor], Tensor] = out_to_loss,
    ):
        if train_x.shape[0] == 0:
            raise ValueError("cannot attribute to an empty training set")
        if train_y.shape[0] != train_x.shape[0]:
            raise ValueError(f"train_x has {train_x.shape[0]} rows but train_y {train_y.shape[0]}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not (ridge == "auto" or (isinstance(ridge, int | float) and ridge >= 0)):
            raise ValueError(f"ridge must be 'auto' or a number >= 0, got {ridge!r}")
        self.model = model.eval()
        self.x, self.y = train_x, train_y
        self.p = sum(v.numel() for v in params_of(model).values())
        self.k = self.p if k is None else int(k)
        self.projected = k is not None
        self.kind, self.seed = kind, int(seed)
        self.ridge, self.ridge_fraction = ridge, ridge_fraction
        self.batch_size = batch_size
        self.output_fn, self.weight_fn = output_fn, weight_fn
        self.projector(0)  # validates k <= p and kind up front
        _check_finite(train_x, "train_x")
        check_differentiable(model, train_x[:1], train_y[:1], output_fn)
        self.n_classes = _n_classes(model, train_x, output_fn)
        self._check_labels(train_y, "train_y")
        n = train_x.shape[0]
        meta = {
            "p": self.p,
            "projected": self.projected,
            "kind": kind,
            "seed": self.seed,
            "params": _signature(model),
            # the features of a different training set of the same size are not these
            "train_data": tensor_fingerprint(train_x, train_y),
        }
        self.store = (
            MemoryStore(n, self.k, batch_size)
            if save_dir is None
            else FeatureStore(save_dir, n, self.k, batch_size, meta)
        )
        self.ridges: dict[int, float] = {}

    def _check_labels(self, y: Tensor, name: str) -> None:
        if self.n_classes is None:
            return
        if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
            raise ValueError(f"{name} must hold integer class labels, got dtype {y.dtype}")
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= self.n_classes):
            raise ValueError(
                f"{name} has labels in [{int(y.min())}, {int(y.max())}], outside [0, "
                f"{self.n_classes}) of the model's {self.n_classes} outputs"
            )

    @property
    def n(self) -> int:
        return self.store.n

    def projector(self, model_id: int) -> Projector:
        """The projector of checkpoint ``model_id`` (its own sketch seed)."""
        if not self.projected:
            return IdentityProjector(self.p)
        return SketchProjector(self.p, self.k, self.seed + int(model_id), self.kind)

    def load(self, checkpoint: Mapping[str, Tensor]) -> None:
        """Load a checkpoint into the model, refusing one of another architecture."""
        try:
            self.model.load_state_dict(checkpoint, strict=True)
        except RuntimeError as exc:
            raise ValueError(f"checkpoint does not match the model: {exc}") from None
        self.model.eval()

    def _features(self, x: Tensor, y: Tensor, proj: Projector) -> Tensor:
        return self._features_and_weights(x, y, proj, need_q=False)[0]

    def _features_and_weights(
        self, x: Tensor, y: Tensor, proj: Projector, need_q: bool = True
    ) -> tuple[Tensor, Tensor | None]:
        g, out = per_example_grads(
            self.model, x, y, self.output_fn, check=False, return_outputs=True
        )
        q = None
        if need_q:
            if self.weight_fn is out_to_loss and self.output_fn in (margin, binary_margin):
                # the margin is log(p / (1 - p)), so 1 - p = sigmoid(-margin): no extra forward
                q = torch.sigmoid(-out)
            else:
                q = self.weight_fn(self.model, x, y)
        return proj.project(g), q

    def featurize(
        self,
        checkpoint: Mapping[str, Tensor],
        model_id: int = 0,
        on_block: Callable[[int], None] | None = None,
    ) -> None:
        """Compute and store the train features and weights of one checkpoint, block by block.

        Blocks already marked done in the store (a previous, interrupted run) are skipped.

        Args:
            checkpoint: a state dict of the model.
            model_id: index of the checkpoint in the ensemble (sets its sketch seed).
            on_block: called with each block index after it is stored (progress, tests).
        """
        self.load(checkpoint)
        proj = self.projector(model_id)
        feats, weights, done = self.store.arrays(model_id)
        fp = checkpoint_fingerprint(checkpoint)
        if self.store.checkpoint_of(model_id) != fp:
            if np.any(done):
                warnings.warn(
                    f"model {model_id}: the stored features come from another checkpoint (or "
                    "one of unknown origin); recomputing them for this one",
                    RuntimeWarning,
                    stacklevel=2,
                )
                done[:] = 0
                if hasattr(done, "flush"):
                    done.flush()
            self.store.set_checkpoint(model_id, fp)
        bs = self.batch_size
        for b in range(self.store.n_blocks):
            if done[b]:
                continue
            sl = slice(b * bs, min(self.n, (b + 1) * bs))
            xb, yb = self.x[sl], self.y[sl]
            phi, q = self._features_and_weights(xb, yb, proj)
            feats[sl] = phi.detach().cpu().numpy()
            if not all_finite(q):
                raise ValueError(f"non-finite reweighting weights in block {b}")
            weights[sl] = q.detach().cpu().numpy()
            self.store.flush(model_id)
            done[b] = 1
            if hasattr(done, "flush"):
                done.flush()
            if on_block is not None:
                on_block(b)

    def is_featurized(self, model_id: int) -> bool:
        return bool(np.all(self.store.arrays(model_id)[2]))

    def gram(self, model_id: int) -> Tensor:
        r""":math:`\Phi^\top\Phi` accumulated over stored blocks (float64)."""
        feats = self.store.arrays(model_id)[0]
        g = torch.zeros(self.k, self.k, dtype=torch.float64)
        for s in range(0, self.n, self.batch_size):
            blk = torch.from_numpy(np.asarray(feats[s : s + self.batch_size])).to(torch.float64)
            g += blk.T @ blk
        return g

    def ridge_for(self, gram_matrix: Tensor) -> float:
        if self.ridge == "auto":
            return default_ridge(gram_matrix, self.n, self.ridge_fraction)
        return float(self.ridge)

    def _kernel_scores(
        self, checkpoint: Mapping[str, Tensor], model_id: int, x: Tensor, y: Tensor
    ) -> tuple[Tensor, Tensor]:
        """(unweighted scores (m, n), weights q (n,)) of one checkpoint, streaming over blocks."""
        if x.shape[0] == 0:
            raise ValueError("no targets to score")
        if tuple(x.shape[1:]) != tuple(self.x.shape[1:]):
            raise ValueError(
                f"targets have example shape {tuple(x.shape[1:])}, the training set "
                f"{tuple(self.x.shape[1:])}"
            )
        if y.shape[0] != x.shape[0]:
            raise ValueError(f"x has {x.shape[0]} targets but y {y.shape[0]} labels")
        _check_finite(x, "target x")
        self._check_labels(y, "target y")
        if not self.is_featurized(model_id):
            raise ValueError(f"model {model_id} is not (fully) featurised; call featurize first")
        if self.store.checkpoint_of(model_id) != checkpoint_fingerprint(checkpoint):
            raise ValueError(
                f"model {model_id} was featurised from another checkpoint than the one to "
                "score with; featurize this checkpoint first"
            )
        self.load(checkpoint)
        g = self.gram(model_id)
        lam = self.ridge_for(g)
        self.ridges[model_id] = lam
        inv = kernel_solve(g, lam)
        proj = self.projector(model_id)
        tgt = torch.cat(
            [
                self._features(x[s : s + self.batch_size], y[s : s + self.batch_size], proj)
                for s in range(0, x.shape[0], self.batch_size)
            ]
        ).to("cpu", torch.float64)  # the store's features and the kernel live on the CPU
        left = tgt @ inv  # (m, k)
        feats, weights, _ = self.store.arrays(model_id)
        out = torch.empty(x.shape[0], self.n, dtype=torch.float64)
        for s in range(0, self.n, self.batch_size):
            e = min(self.n, s + self.batch_size)
            blk = torch.from_numpy(np.asarray(feats[s:e])).to(torch.float64)
            out[:, s:e] = left @ blk.T
        return out, torch.from_numpy(np.asarray(weights)).to(torch.float64)

    def score_model(
        self, checkpoint: Mapping[str, Tensor], model_id: int, x: Tensor, y: Tensor
    ) -> Tensor:
        """Scores (m, n) of one checkpoint: its kernel scores times its own weights q."""
        k, q = self._kernel_scores(checkpoint, model_id, x, y)
        return k * q[None, :]

    def score(
        self,
        x: Tensor,
        y: Tensor,
        checkpoints: Mapping[int, Mapping[str, Tensor]] | None = None,
    ) -> Tensor:
        r"""Ensemble scores (m, n) over checkpoints ``{model_id: state_dict}``.

        TRAK's ensemble: the kernel scores and the weights are averaged separately,
        :math:`\tau = \big(\tfrac1J\sum_j \phi_{t,j}^\top A_j^{-1}\Phi_j^\top\big)
        \odot \tfrac1J\sum_j q_j` (averaging q over models lowers its variance). Without
        ``checkpoints`` the model's current parameters are scored as model 0.
        """
        if checkpoints is None:
            checkpoints = {0: {k: v.detach().clone() for k, v in self.model.state_dict().items()}}
        if not checkpoints:
            raise ValueError("no checkpoints to score")
        total, qsum = None, None
        for mid, ck in checkpoints.items():
            s, q = self._kernel_scores(ck, mid, x, y)
            total = s if total is None else total + s
            qsum = q if qsum is None else qsum + q
        j = len(checkpoints)
        return (total / j) * (qsum / j)[None, :]
