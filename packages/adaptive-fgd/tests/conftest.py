import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
torch.set_num_threads(min(torch.get_num_threads(), 2))


@pytest.fixture(autouse=True)
def _float64_default():
    # The references here are float64; set the default per test and restore it, so nothing
    # leaks into other test sessions run in the same interpreter.
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)
