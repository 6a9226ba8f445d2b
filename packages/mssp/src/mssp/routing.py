r"""Top-K routing and gather/scatter dispatch: the pure functions behind :class:`mssp.MoELayer`.

Setting: ``T`` tokens :math:`h_t \in \mathbb R^N`, ``M`` experts, each token sent to ``K``.

* Routing (:func:`topk_route`): router logits :math:`r_t \in \mathbb R^M`, the ``K`` largest
  :math:`S_t = \operatorname{top}_K(r_t)`, and combine weights :math:`g_{t,e}`, :math:`e \in S_t`:
  the full softmax's probabilities (Switch style, ``renormalize=False``) or a softmax restricted
  to the chosen experts (Mixtral style, ``renormalize=True``, so
  :math:`\sum_{e \in S_t} g_{t,e} = 1`).
* Dispatch (:func:`dispatch`): the ``T*K`` (token, expert) slots are sorted by expert and
  scattered into a padded buffer ``[M, C, N]`` (``C`` = the largest load, so no token is
  dropped); each expert is then one batched matmul (:func:`expert_mlp`), and
  :func:`combine` scatters the ``K`` expert outputs of each token back, weighted by
  :math:`g_{t,e}`, with one ``index_add``. No Python loop over tokens or experts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "Dispatch",
    "combine",
    "dispatch",
    "expert_mlp",
    "load_balancing_loss",
    "topk_route",
]


def topk_route(
    logits: torch.Tensor, k: int, *, renormalize: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Top-``k`` experts of each token and their softmax weights.

    .. math:: S_t = \operatorname{top}_k(r_t), \qquad
              g_{t,e} = \frac{\exp r_{t,e}}{\sum_{j \in J} \exp r_{t,j}}\ (e \in S_t),

    with :math:`J = S_t` (``renormalize=True``, Mixtral style: the gates sum to 1) or
    :math:`J = \{1..M\}` (``renormalize=False``, Switch style: the full softmax's top-``k``
    probabilities; with ``k = 1`` only this variant gives the router a gradient).

    Args:
        logits: router logits, shape ``(T, M)``, finite.
        k: experts per token, ``1 <= k <= M``.
        renormalize: softmax over the chosen experts (True) or over all experts (False).

    Returns:
        ``(index, gate)``: shapes ``(T, k)``; ``index`` (int64) lists each token's experts by
        decreasing logit; ``gate`` is differentiable in ``logits``.

    Example:
        >>> idx, g = topk_route(torch.tensor([[0.0, 2.0, 1.0]]), 2)
        >>> idx.tolist(), round(float(g.sum()), 6)
        ([[1, 2]], 1.0)
    """
    if logits.ndim != 2:
        raise ValueError(f"logits must have shape (T, M), got {tuple(logits.shape)}")
    m = logits.shape[1]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= m:
        raise ValueError(f"k must be an int with 1 <= k <= M = {m}, got {k!r}")
    if renormalize:
        top, index = torch.topk(logits, k, dim=-1)
        return index, torch.softmax(top, dim=-1)
    index = torch.topk(logits, k, dim=-1).indices
    return index, torch.softmax(logits, dim=-1).gather(1, index)


@dataclass(frozen=True)
class Dispatch:
    """Where each (token, expert) slot sits in the padded per-expert buffer.

    Attributes:
        token: token of each slot, sorted by expert, shape ``(T*K,)``.
        expert: expert of each sorted slot, shape ``(T*K,)``.
        position: row of each sorted slot inside its expert's block, shape ``(T*K,)``.
        order: the permutation that sorted the flattened ``(T, K)`` slots.
        load: tokens per expert, shape ``(M,)``.
        capacity: ``C = max(load)``, the rows per expert in the buffer.
    """

    token: torch.Tensor
    expert: torch.Tensor
    position: torch.Tensor
    order: torch.Tensor
    load: torch.Tensor
    capacity: int


def dispatch(index: torch.Tensor, num_experts: int) -> Dispatch:
    """Sort the slots of a routing by expert and give each its row in a padded buffer.

    Args:
        index: ``(T, K)`` expert of each slot, from :func:`topk_route`.
        num_experts: ``M``.

    Returns:
        A :class:`Dispatch`.
    """
    t, k = index.shape
    flat = index.reshape(-1)
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= num_experts):
        raise ValueError(f"expert indices must lie in [0, {num_experts}), got {flat.tolist()[:8]}")
    order = torch.argsort(flat, stable=True)
    expert = flat[order]
    token = torch.arange(t, device=index.device).repeat_interleave(k)[order]
    load = torch.bincount(flat, minlength=num_experts)
    start = torch.cumsum(load, 0) - load
    position = torch.arange(flat.numel(), device=index.device) - start[expert]
    capacity = int(load.max()) if flat.numel() else 0
    return Dispatch(token, expert, position, order, load, capacity)


def expert_mlp(
    h: torch.Tensor,
    d: Dispatch,
    w1: torch.Tensor,
    w2: torch.Tensor,
    mult1: float = 1.0,
    mult2: float = 1.0,
    act=torch.relu,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Every chosen expert's MLP on its tokens, as two batched matmuls over a padded buffer.

    For a slot (token ``t``, expert ``e``):
    :math:`u = \alpha_1 W_{1,e} h_t`, :math:`y = \alpha_2 W_{2,e}\,\phi(u)`.

    Args:
        h: tokens, ``(T, N)``.
        d: the :class:`Dispatch` of the routing.
        w1: up projections, ``(M, N_e, N)``; w2: down projections, ``(M, N, N_e)``.
        mult1, mult2: the multipliers :math:`\alpha_1, \alpha_2`.
        act: the nonlinearity :math:`\phi`.

    Returns:
        ``(y, u)``: expert outputs ``(T*K, N)`` and pre-activations ``(T*K, N_e)``, one row per
        slot in the sorted order of ``d``.
    """
    m, _ne, n = w1.shape
    buf = h.new_zeros(m, d.capacity, n)
    buf = buf.index_put((d.expert, d.position), h[d.token])
    u_buf = mult1 * torch.bmm(buf, w1.transpose(1, 2))  # (M, C, N_e)
    y_buf = mult2 * torch.bmm(act(u_buf), w2.transpose(1, 2))  # (M, C, N)
    return y_buf[d.expert, d.position], u_buf[d.expert, d.position]


def combine(y: torch.Tensor, gate: torch.Tensor, d: Dispatch, num_tokens: int) -> torch.Tensor:
    r""":math:`\sum_{e \in S_t} g_{t,e}\, y_{t,e}` for every token, by one ``index_add``.

    Args:
        y: slot outputs in the sorted order of ``d``, ``(T*K, N)``.
        gate: ``(T, K)`` weights from :func:`topk_route`.
        d: the :class:`Dispatch`.
        num_tokens: ``T``.

    Returns:
        ``(T, N)``.
    """
    w = gate.reshape(-1)[d.order].unsqueeze(-1)
    out = y.new_zeros(num_tokens, y.shape[-1])
    return out.index_add(0, d.token, w * y)


def load_balancing_loss(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    r"""The Switch-Transformer auxiliary loss :math:`M \sum_e f_e P_e`.

    :math:`f_e` = fraction of the ``T*K`` slots sent to expert ``e`` (not differentiable),
    :math:`P_e` = mean over tokens of the full softmax probability of ``e``. It equals 1 for a
    perfectly balanced router whose probabilities are uniform, and grows with imbalance.

    Args:
        logits: ``(T, M)``; index: ``(T, K)`` from :func:`topk_route`.

    Returns:
        A scalar tensor.
    """
    m = logits.shape[1]
    f = torch.bincount(index.reshape(-1), minlength=m).to(logits.dtype) / index.numel()
    p = torch.softmax(logits, dim=-1).mean(0)
    return m * (f * p).sum()
