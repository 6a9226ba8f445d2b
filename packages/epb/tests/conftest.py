import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# tiny tensors: one thread avoids OpenMP barrier stalls on a shared 2-core machine
torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def sandbox():
    """The process-wide program sandbox, started once per test session (two interpreters that
    import torch: seconds) and shared by every test that runs a program."""
    from epb.sandbox import default_sandbox

    box = default_sandbox().start()
    yield box
    box.close()
