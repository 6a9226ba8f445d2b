"""Catch tensors a package creates on the default device without naming one.

On a GPU, a factory call without ``device=`` (``torch.arange``, ``torch.zeros``,
``torch.tensor``, ...) inside code that works on CUDA tensors makes a CPU tensor, which then
fails against the CUDA values or forces a copy and a sync. Such a bug shows only on a GPU. This
mode shows it on the CPU: run the code under it and it records every call that made a tensor
from no tensor argument and without a ``device`` keyword, if the call came from the named
package's files.

Example:
    >>> import torch
    >>> from shared_core.testing import DefaultDeviceFactories
    >>> def scale(x):  # a test would call the package's own code
    ...     return x * torch.arange(x.shape[0])
    >>> x = torch.ones(3)
    >>> with DefaultDeviceFactories("<doctest") as mode:
    ...     _ = scale(x)
    >>> [line for _, _, line in mode.sites]
    ['return x * torch.arange(x.shape[0])']
"""

from __future__ import annotations

import traceback
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

__all__ = ["DefaultDeviceFactories"]


class DefaultDeviceFactories(TorchFunctionMode):
    """Records ``(file, line number, source line)`` of default-device factory calls.

    Args:
        where: a fragment of the file paths to watch, e.g. ``"/adaptive_lmo/"``; the
            innermost frame of the call stack whose file contains it is recorded.

    Attributes:
        sites: the set of recorded call sites (empty when the code names every device).
    """

    def __init__(self, where: str) -> None:
        super().__init__()
        if not where:
            raise ValueError("where must name part of the watched files' paths, got ''")
        self.where = where
        self.sites: set[tuple[str, int, str]] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        # a factory: a tensor made from no tensor (not a grad-mode switch or a shape query)
        if isinstance(out, torch.Tensor) and kwargs.get("device") is None:
            leaves, _ = tree_flatten((args, kwargs))
            if not any(isinstance(v, torch.Tensor) for v in leaves):
                stack = traceback.extract_stack()
                # not this file's own frame, which a fragment like "/shared_core/" would match
                ours = [f for f in stack if self.where in f.filename and f.filename != __file__]
                if ours:
                    self.sites.add((ours[-1].filename, ours[-1].lineno or 0, ours[-1].line or ""))
        return out
