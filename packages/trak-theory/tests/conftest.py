"""Test configuration for trak-theory.

Without a CUDA device, the Triton sketch kernel runs on the CPU interpreter; the variable must
be set before anything imports triton, which is why it happens at import time here.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
torch.set_num_threads(min(torch.get_num_threads(), 2))


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded CPU generator: fresh but reproducible random inputs per test."""
    return torch.Generator().manual_seed(20261202)
