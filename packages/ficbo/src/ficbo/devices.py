"""Where the model runs: one checked device choice for pretraining, policies and experiments.

Only the transformer (its weights and the tensors fed to it) moves to the chosen device. The
prior sampler, the optimisation loop's bookkeeping and every seeded generator stay on the CPU,
so the tasks, the initial designs and the Thompson draws are the same on every device and only
the model's floating-point rounding differs between a CPU and a GPU run. The GP baselines
(BoTorch) also stay on the CPU.
"""

from __future__ import annotations

import torch

__all__ = ["model_device", "resolve_device"]


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """A usable :class:`torch.device` from ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``.

    ``None`` means the CPU: the numbers in the README are CPU numbers, and a GPU is used only
    when asked for.

    Raises:
        ValueError: on an unknown device string, or a device this machine does not have (the
            message says what was asked for and what is available), so a GPU command on a
            CPU-only machine fails at once instead of after the data are built.
    """
    if device is None:
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"unknown device {device!r}; use 'cpu', 'cuda' or 'cuda:<n>'") from err
    if dev.type == "cpu":
        return dev
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {str(device)!r} requested but CUDA is not available on this machine "
                "(torch.cuda.is_available() is False); use device='cpu'"
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ValueError(
                f"device {str(device)!r} requested but this machine has {count} CUDA device(s)"
            )
        return dev
    if dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {str(device)!r} requested but MPS is not available")
        return dev
    raise ValueError(f"unsupported device {str(device)!r}; use 'cpu', 'cuda' or 'cuda:<n>'")


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of a model's weights (all of a model's weights live on one device here)."""
    return next(model.parameters()).device
