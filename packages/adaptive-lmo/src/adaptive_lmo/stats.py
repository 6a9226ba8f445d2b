r"""Input-activation statistics for the criterion, collected by forward hooks.

What is kept. The criterion needs :math:`c_i = v_i^\top\Sigma v_i` with :math:`\Sigma` the
uncentred second moment of the layer's input features. Instead of the ``n x n`` matrix, the
collector keeps a row sketch: at most ``max_rows`` feature rows, sampled uniformly without
replacement from the forward passes of the step that will update the exponent (every
``update_every``-th step), so :math:`\hat\Sigma = X_s^\top X_s / k` and the memory is
``max_rows * n`` numbers per layer, only while a sketch is pending.

Features per layer kind (the matrix view of the weight is what the optimizer transforms):

- ``nn.Linear``: the input ``(..., n)`` flattened to rows; matrix view ``W`` itself.
- ``nn.Conv1d``/``nn.Conv2d`` (``groups=1``, zero padding, numeric padding): unfolded input
  patches ``(B * L, C * kh * kw)``; matrix view ``W.reshape(out, -1)``, whose column order
  (channel, then kernel rows, then kernel columns) is ``F.unfold``'s.
- anything else (other convs, grouped or ``padding="same"`` convs, stacked MoE experts
  ``(E, out, in)``, parameters used through ``F.linear`` in custom modules): no hook; feed rows
  yourself through ``AdaptiveLMO.record_activations`` or the layer uses the optimizer's
  documented fallback exponent (with a warning naming it). The same holds for an
  ``nn.Linear`` whose weight is used functionally instead of by calling the module (the
  ``out_proj`` of ``nn.MultiheadAttention``): it is hooked, but the hook never fires.

Passes run with gradients disabled (evaluation) are not recorded.

Output gradients (``curvature="kfac"``). For parameters in ``want_out`` the forward hook also
registers a tensor hook on the module's output, so the backward pass of the same forward hands
over :math:`\partial L/\partial z` for every output row (``nn.Linear``: ``(..., m)`` flattened
to rows; convs: ``(B, out, *spatial)`` to ``(B * L, out)``), sketched the same way into at most
``max_rows`` rows. With a mean-reduced loss each row is ``1/N`` of the per-example gradient; the
criterion is invariant to that scale. Rows recorded while ``fisher_mode`` is set (the
optimizer's sampled-target backward, ``AdaptiveLMO.fisher_backward``) are kept apart and
replace the user's own rows on that criterion step.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["ActivationCollector", "feature_fn_for", "output_rows", "subsample_rows"]


def subsample_rows(X: Tensor, k: int, generator: torch.Generator) -> Tensor:
    """At most ``k`` rows of ``X`` (``(..., N, n)``), uniformly without replacement."""
    N = X.shape[-2]
    if k >= N:
        return X
    # drawn where the generator lives (the CPU): the same rows on every device, then moved
    idx = torch.randperm(N, generator=generator, device=generator.device)[:k].to(X.device)
    return X.index_select(-2, idx)


def _linear_features(module: nn.Linear, x: Tensor, max_rows: int) -> Tensor:
    return x.reshape(-1, x.shape[-1])


def _conv_features(module: nn.Conv1d | nn.Conv2d, x: Tensor, max_rows: int) -> Tensor:
    two_d = isinstance(module, nn.Conv2d)
    pad = module.padding
    if isinstance(pad, str):  # only "valid" reaches here (feature_fn_for)
        pad = (0,) * len(module.kernel_size)
    if not two_d:  # Conv1d as a Conv2d with a 1-row kernel
        x = x.unsqueeze(-2)
    if x.ndim == 3:  # unbatched input
        x = x.unsqueeze(0)
    ks = module.kernel_size if two_d else (1, module.kernel_size[0])
    st = module.stride if two_d else (1, module.stride[0])
    pd = tuple(pad) if two_d else (0, pad[0])
    dl = module.dilation if two_d else (1, module.dilation[0])
    # Unfolding multiplies the input by kh*kw: unfold only enough images for the sketch.
    B = x.shape[0]
    L = max(1, (x.shape[-2] * x.shape[-1]) // max(1, st[0] * st[1]))
    nb = min(B, max(1, -(-4 * max_rows // L)))
    cols = F.unfold(x[:nb], ks, dilation=dl, padding=pd, stride=st)  # (nb, C*kh*kw, L)
    return cols.transpose(1, 2).reshape(-1, cols.shape[1])


def output_rows(module: nn.Module, g: Tensor) -> Tensor:
    """Rows ``(N, out)`` of the gradient ``g`` at ``module``'s output (Linear or Conv)."""
    if isinstance(module, nn.Linear):
        return g.reshape(-1, g.shape[-1])
    conv_ndim = 2 if isinstance(module, nn.Conv2d) else 1
    if g.ndim == conv_ndim + 1:  # unbatched
        g = g.unsqueeze(0)
    return g.movedim(1, -1).reshape(-1, g.shape[1])


def feature_fn_for(module: nn.Module) -> Callable[[nn.Module, Tensor, int], Tensor] | None:
    """The feature extractor for ``module``'s weight, or None when hooks cannot see its inputs."""
    if isinstance(module, nn.Linear):
        return _linear_features
    if type(module) in (nn.Conv1d, nn.Conv2d):
        if module.groups != 1 or module.padding_mode != "zeros":
            return None
        if isinstance(module.padding, str) and module.padding != "valid":
            return None
        return _conv_features
    return None


class ActivationCollector:
    """Row sketches of layer inputs, keyed by parameter, filled by forward hooks.

    ``due`` is the set of parameter ids whose next optimizer step updates the exponent; hooks
    only record for those. Hooks hold a weak reference to the collector, and the owner removes
    them (``remove``) or a finalizer does when the owner is garbage-collected.
    """

    def __init__(self, max_rows: int, seed: int = 0) -> None:
        self.max_rows = int(max_rows)
        self.generator = torch.Generator().manual_seed(seed)
        self.rows: dict[int, list[Tensor]] = {}
        self.out_rows: dict[int, list[Tensor]] = {}
        # rows of a sampled-target backward (AdaptiveLMO.fisher_backward): the true Fisher
        self.fisher_rows: dict[int, list[Tensor]] = {}
        self.fisher_mode = False
        self.due: set[int] = set()
        self.want_out: set[int] = set()
        self.hooked: set[int] = set()
        self.handles: list[torch.utils.hooks.RemovableHandle] = []

    def add(self, key: int, X: Tensor) -> None:
        """Append feature rows ``X`` (``(..., N, n)``) for parameter ``key`` (sketched)."""
        if X.shape[-2] == 0:
            return
        X = subsample_rows(X.detach(), self.max_rows, self.generator)
        self.rows.setdefault(key, []).append(X)

    def add_output(self, key: int, Gr: Tensor, fisher: bool = False) -> None:
        """Append output-gradient rows ``Gr`` (``(N, m)``) for parameter ``key`` (sketched);
        ``fisher``: rows of a sampled-target backward, kept apart from the user's own."""
        if Gr.shape[-2] == 0:
            return
        Gr = subsample_rows(Gr.detach(), self.max_rows, self.generator)
        (self.fisher_rows if fisher else self.out_rows).setdefault(key, []).append(Gr)

    def _take(self, store: dict[int, list[Tensor]], key: int) -> Tensor | None:
        parts = store.pop(key, None)
        if not parts:
            return None
        X = torch.cat(parts, dim=-2) if len(parts) > 1 else parts[0]
        return subsample_rows(X, self.max_rows, self.generator)

    def take(self, key: int) -> Tensor | None:
        """The input sketch for ``key`` (at most ``max_rows`` rows), removed from the store."""
        return self._take(self.rows, key)

    def take_output(self, key: int) -> tuple[Tensor | None, bool]:
        """The output-gradient sketch for ``key`` (at most ``max_rows`` rows), removed, and
        whether it holds sampled-target (Fisher) rows, which are preferred when present."""
        fisher = self._take(self.fisher_rows, key)
        own = self._take(self.out_rows, key)
        return (fisher, True) if fisher is not None else (own, False)

    def clear(self) -> None:
        self.rows.clear()
        self.out_rows.clear()
        self.fisher_rows.clear()

    def nbytes(self) -> int:
        """Bytes held by pending sketches (inputs and output gradients)."""
        return sum(
            t.numel() * t.element_size()
            for store in (self.rows, self.out_rows, self.fisher_rows)
            for parts in store.values()
            for t in parts
        )

    def hook(self, module: nn.Module, param: Tensor) -> bool:
        """Register a forward hook on ``module`` recording inputs for ``param``; False if none."""
        fn = feature_fn_for(module)
        if fn is None:
            return False
        ref = weakref.ref(self)
        key = id(param)

        def forward_hook(mod: nn.Module, inputs: tuple, output: object) -> None:
            col = ref()
            if col is None or key not in col.due or not torch.is_grad_enabled() or not inputs:
                return
            x = inputs[0]
            if not isinstance(x, Tensor):
                return
            with torch.no_grad():
                col.add(key, fn(mod, x.detach(), col.max_rows))
            if key in col.want_out and isinstance(output, Tensor) and output.requires_grad:

                def grad_hook(g: Tensor) -> None:
                    c2 = ref()
                    if c2 is not None and key in c2.due:
                        with torch.no_grad():
                            c2.add_output(key, output_rows(mod, g.detach()), c2.fisher_mode)

                output.register_hook(grad_hook)

        self.handles.append(module.register_forward_hook(forward_hook))
        self.hooked.add(key)
        return True

    @staticmethod
    def remove_handles(handles: list[torch.utils.hooks.RemovableHandle]) -> None:
        for h in handles:
            h.remove()
        handles.clear()
