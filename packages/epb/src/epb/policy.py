r"""The black-box teacher: an attention-model construction policy (POMO-style), and the adapter
interface any policy must follow to be distilled.

**Adapter.** A teacher is any object with ``bind(instances, repeats=1)`` returning a *step
function* ``f(state) -> log_probs``: ``(R, n)`` log-probabilities of the next node for every row
of a :class:`~epb.problems.RolloutState` (``-inf`` on infeasible nodes). ``repeats`` says that
row ``r`` of the states holds instance ``r // repeats`` (multi-start rollouts), so a policy may
encode each instance once. :class:`FunctionTeacher` wraps a plain ``state -> logits`` function.

**Model.** Encoder: a linear node embedding (CVRP: separate depot embedding; customers see
``(x, y, demand)``) followed by ``layers`` transformer encoder layers. Decoder, per step: a query
from the embeddings of the first and current nodes (CVRP: current node and remaining capacity),
one multi-head glimpse over the feasible nodes, and single-head compatibilities clipped as
:math:`C \tanh(q^\top k_j / \sqrt d)` with :math:`C = 10`, masked and soft-maxed.

Example:
    >>> from epb.problems import random_tsp
    >>> from epb.rollout import rollout
    >>> pol = AttentionPolicy("tsp", dim=16, layers=1, heads=2)
    >>> inst = random_tsp(3, 8, torch.Generator().manual_seed(0))
    >>> out = rollout(pol.bind(inst), inst)
    >>> tuple(out.lengths.shape)
    (3,)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor, nn

from .problems import Instances, RolloutState

StepFn = Callable[[RolloutState], Tensor]


class Teacher(Protocol):
    """What EPB needs from a policy: per-step action log-probabilities on any state."""

    def bind(self, inst: Instances, repeats: int = 1) -> StepFn:  # pragma: no cover - protocol
        ...


class FunctionTeacher:
    """Adapter for a user policy given as ``logits_fn(state) -> (R, n)`` scores.

    Infeasible nodes are masked, the scores soft-maxed with ``temperature``.

    Example:
        >>> nn_teacher = FunctionTeacher(lambda s: -s.dist[torch.arange(len(s.current)),
        ...                              s.current], temperature=0.05)
    """

    def __init__(self, logits_fn: Callable[[RolloutState], Tensor], temperature: float = 1.0):
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.logits_fn = logits_fn
        self.temperature = temperature

    def bind(self, inst: Instances, repeats: int = 1) -> StepFn:
        def step(st: RolloutState) -> Tensor:
            z = self.logits_fn(st) / self.temperature
            return z.masked_fill(~st.feasible(), -math.inf).log_softmax(-1)

        return step


class AttentionPolicy(nn.Module):
    """Attention-model policy for ``kind`` in ``{"tsp", "cvrp"}``.

    Args:
        kind: problem kind.
        dim: embedding width. layers: encoder layers. heads: attention heads.
        ff: feed-forward hidden width (default ``4 * dim``). clip: logit clipping :math:`C`.
    """

    def __init__(
        self,
        kind: str = "tsp",
        dim: int = 64,
        layers: int = 3,
        heads: int = 8,
        ff: int | None = None,
        clip: float = 10.0,
    ):
        super().__init__()
        if kind not in ("tsp", "cvrp"):
            raise ValueError(f"kind must be 'tsp' or 'cvrp', got {kind!r}")
        if dim % heads:
            raise ValueError(f"dim={dim} must be divisible by heads={heads}")
        self.config = dict(kind=kind, dim=dim, layers=layers, heads=heads, ff=ff, clip=clip)
        self.kind, self.dim, self.heads, self.clip = kind, dim, heads, clip
        self.embed = nn.Linear(2 if kind == "tsp" else 3, dim)
        if kind == "cvrp":
            self.embed_depot = nn.Linear(2, dim)
        layer = nn.TransformerEncoderLayer(
            dim, heads, ff or 4 * dim, dropout=0.0, batch_first=True, norm_first=False
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.keys = nn.Linear(dim, 3 * dim, bias=False)
        if kind == "tsp":
            self.q_first = nn.Linear(dim, dim, bias=False)
            self.q_cur = nn.Linear(dim, dim, bias=False)
        else:
            self.q_cur = nn.Linear(dim + 1, dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def encode(self, inst: Instances) -> Tensor:
        """``(B, n, dim)`` node embeddings."""
        if self.kind == "tsp":
            if inst.kind != "tsp":
                raise ValueError("a TSP policy got CVRP instances")
            x = self.embed(inst.coords)
        else:
            if inst.kind != "cvrp":
                raise ValueError("a CVRP policy got TSP instances")
            cust = self.embed(torch.cat([inst.coords[:, 1:], inst.demand[:, 1:, None]], -1))
            x = torch.cat([self.embed_depot(inst.coords[:, :1]), cust], 1)
        return self.encoder(x)

    def bind(self, inst: Instances, repeats: int = 1) -> StepFn:
        h = self.encode(inst)  # (B, n, d); state rows are (instance, repeat) pairs
        b, n, d = h.shape
        p, hd = repeats, d // self.heads
        gk, gv, lk = self.keys(h).chunk(3, -1)
        gk = gk.view(b, n, self.heads, hd).transpose(1, 2)  # (B, H, n, hd)
        gv = gv.view(b, n, self.heads, hd).transpose(1, 2)
        inst_of_row = torch.arange(b, device=h.device).repeat_interleave(p)

        def step(st: RolloutState) -> Tensor:
            hc = h[inst_of_row, st.current]
            if self.kind == "tsp":
                q = self.q_first(h[inst_of_row, st.first]) + self.q_cur(hc)
            else:
                q = self.q_cur(torch.cat([hc, st.remaining[:, None].to(hc.dtype)], -1))
            mask = st.feasible().view(b, 1, p, n)
            q = q.view(b, p, self.heads, hd).transpose(1, 2)  # (B, H, P, hd)
            att = (q @ gk.transpose(-1, -2)) / math.sqrt(hd)  # (B, H, P, n)
            att = att.masked_fill(~mask, -math.inf).softmax(-1)
            g = self.out((att @ gv).transpose(1, 2).reshape(b, p, d))  # (B, P, d)
            logits = self.clip * torch.tanh((g @ lk.transpose(1, 2)) / math.sqrt(d))
            logits = logits.reshape(b * p, n)
            return logits.masked_fill(~mask.view(b * p, n), -math.inf).log_softmax(-1)

        return step

    def save(self, path: str | Path, **meta) -> None:
        """Checkpoint as float16 weights + config (+ ``meta``, e.g. training time)."""
        sd = {k: v.detach().half() for k, v in self.state_dict().items()}
        torch.save({"config": self.config, "state_dict": sd, "meta": meta}, path)

    @staticmethod
    def load(path: str | Path) -> AttentionPolicy:
        ck = torch.load(path, map_location="cpu", weights_only=True)
        pol = AttentionPolicy(**ck["config"])
        pol.load_state_dict({k: v.float() for k, v in ck["state_dict"].items()})
        pol.checkpoint_meta = ck.get("meta", {})
        return pol.eval()


DATA = Path(__file__).parent / "data"


def load_teacher(kind: str = "tsp", n: int = 20) -> AttentionPolicy:
    """The shipped teacher checkpoint ``data/teacher_{kind}{n}.pt``."""
    path = DATA / f"teacher_{kind}{n}.pt"
    if not path.exists():
        raise FileNotFoundError(
            f"no shipped checkpoint {path.name}; train one with "
            f"`python -m epb.train --problem {kind} --n {n}`"
        )
    return AttentionPolicy.load(path)
