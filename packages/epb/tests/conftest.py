import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# tiny tensors: one thread avoids OpenMP barrier stalls on a shared 2-core machine
torch.set_num_threads(1)
