r"""Baselines the experiments compare against (not part of the iMuon method).

- :class:`ScaledGD`: preconditioned gradient descent on LoRA/low-rank factors (Tong, Ma and Chi,
  2021; the "Riemannian preconditioned LoRA" of Zhang and Pilanci, 2024, is the same
  preconditioner with damping):
  :math:`A \leftarrow A - \eta\,\nabla_A f\,(B^\top B + \delta I)^{-1}`,
  :math:`B \leftarrow B - \eta\,\nabla_B f\,(A^\top A + \delta I)^{-1}`, optional momentum.
- :func:`manifold_muon_dual_ascent`: the "manifold Muon" LMO on Stiefel posed in the ambient
  spectral ball intersected with the tangent space, solved by dual ascent on the symmetric
  multiplier (each iteration one polar factor), as a reference for the closed form.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor
from torch.optim import Optimizer

from shared_core.polar import msign

__all__ = ["ScaledGD", "manifold_muon_dual_ascent"]


class ScaledGD(Optimizer):
    r"""Scaled (Riemannian-preconditioned) gradient descent on factor pairs ``(A, B)``.

    Args:
        params: tensors in pairs ``A`` (m, r), ``B`` (n, r) (``X = A B^T``), or with
            ``factor_layout="peft"`` peft's ``lora_B`` (m, r), ``lora_A`` (r, n)
            (``X = lora_B lora_A``: ``A = lora_B``, ``B = lora_A^T``).
        lr: step size.
        momentum: heavy-ball coefficient on the preconditioned step (0: none).
        damping: :math:`\delta` added to the Gram matrices.
        factor_layout: ``"AB"`` or ``"peft"``.

    Example:
        >>> A = torch.nn.Parameter(torch.randn(5, 2)); B = torch.nn.Parameter(torch.randn(4, 2))
        >>> opt = ScaledGD([A, B], lr=0.5)
        >>> ((A @ B.T - 1) ** 2).sum().backward(); opt.step()
    """

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 0.5,
        momentum: float = 0.0,
        damping: float = 0.0,
        factor_layout: str = "AB",
    ):
        if lr <= 0:
            raise ValueError(f"invalid lr: {lr!r}")
        if not 0 <= momentum < 1:
            raise ValueError(f"invalid momentum: {momentum!r}")
        if damping < 0:
            raise ValueError(f"invalid damping: {damping!r}")
        if factor_layout not in ("AB", "peft"):
            raise ValueError(f"invalid factor_layout: {factor_layout!r} (use 'AB' or 'peft')")
        self.peft = factor_layout == "peft"
        super().__init__(params, dict(lr=lr, momentum=momentum, damping=damping))
        for g in self.param_groups:
            if len(g["params"]) % 2:
                raise ValueError("ScaledGD needs its params in (A, B) pairs")

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for g in self.param_groups:
            ps = g["params"]
            for pa, pb in zip(ps[0::2], ps[1::2], strict=True):
                # B (n, r) and its gradient as views of peft's lora_A (r, n)
                view = (lambda t: t.mT) if self.peft else (lambda t: t)
                a, b, ga, gb = pa, view(pb), pa.grad, view(pb.grad)
                eye = torch.eye(a.shape[1], dtype=a.dtype, device=a.device) * g["damping"]
                da = torch.linalg.solve(b.T @ b + eye, ga.T).T
                db = torch.linalg.solve(a.T @ a + eye, gb.T).T
                for p, x, d, v in ((pa, a, da, lambda t: t), (pb, b, db, view)):
                    if g["momentum"]:
                        st = self.state[p]
                        buf = v(st.setdefault("momentum_buffer", torch.zeros_like(p)))
                        buf.mul_(g["momentum"]).add_(d)
                        d = buf
                    x.add_(d, alpha=-g["lr"])
        return loss


def manifold_muon_dual_ascent(
    X: Tensor, G: Tensor, iters: int = 100, step: float = 0.5, polar: str = "svd"
) -> tuple[Tensor, Tensor]:
    r"""Manifold-Muon direction on Stiefel by dual ascent (a baseline for the closed form).

    Solves :math:`\min_{A} \langle G, A\rangle` s.t. :math:`\|A\|_2 \le 1`,
    :math:`X^\top A + A^\top X = 0` through the Lagrangian with a symmetric multiplier
    :math:`\Lambda`: :math:`A(\Lambda) = -\mathrm{msign}(G + X\Lambda)` (the spectral LMO), and
    the dual (super)gradient is :math:`-(X^\top A + A^\top X)`, so
    :math:`\Lambda \leftarrow \Lambda + \alpha\,(X^\top A + A^\top X)` with a decaying step.
    Each iteration costs one polar factor. The final :math:`A` is projected onto the tangent
    space (which can leave the spectral ball slightly).

    Returns:
        ``(A, tangency_error)`` with ``tangency_error = ||X^T A + A^T X||_F`` before the final
        projection.
    """
    lam = torch.zeros(X.shape[1], X.shape[1], dtype=X.dtype, device=X.device)
    A = -msign(G, method=polar)
    for k in range(iters):
        A = -msign(G + X @ lam, method=polar)
        h = X.mT @ A + A.mT @ X
        lam = lam + step / (1 + k) ** 0.5 * h
    err = (X.mT @ A + A.mT @ X).norm()
    sym = 0.5 * (X.mT @ A + A.mT @ X)
    return A - X @ sym, err
