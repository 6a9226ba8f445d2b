"""Test configuration for shared-core.

Without a CUDA device, Triton kernels run on the CPU interpreter; the variable must be set
before anything imports triton, which is why it happens here and not in a fixture.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Small CPU machines: more threads than cores only adds contention.
torch.set_num_threads(min(torch.get_num_threads(), 2))


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded CPU generator, so every test draws fresh but reproducible random inputs."""
    return torch.Generator().manual_seed(20261202)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device (run with `nox -s gpu`)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
