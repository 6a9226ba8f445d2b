"""One call that seeds every random number generator an experiment touches."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

__all__ = ["seed_everything"]


def seed_everything(seed: int, *, deterministic: bool = False) -> int:
    """Seed Python's ``random``, NumPy and torch (CPU and every CUDA device).

    Args:
        seed: a non-negative integer below 2**32.
        deterministic: also ask torch for deterministic kernels (slower; some ops then raise).

    Returns:
        The seed, for logging.

    Example:
        >>> seed_everything(0)
        0
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an int in [0, 2**32), got {seed!r}")
    random.seed(seed)
    # Legacy global state on purpose: it is what third-party code calling np.random.* reads.
    np.random.seed(seed)  # noqa: NPY002
    torch.manual_seed(seed)  # seeds CUDA devices too
    os.environ["PYTHONHASHSEED"] = str(seed)  # for subprocesses this run starts
    if deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    return seed
