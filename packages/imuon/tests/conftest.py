import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# One thread: on a shared, loaded 2-core machine OpenMP regions of tiny LAPACK calls
# (orgqr inside linalg.qr) otherwise spin for milliseconds each.
torch.set_num_threads(1)
