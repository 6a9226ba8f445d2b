import os
import pathlib
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
torch.set_num_threads(min(torch.get_num_threads(), 2))
# experiments run their sweeps in one process under test (the worker pool has its own test)
os.environ.setdefault("FRONTIER_OPT_WORKERS", "1")
# Test helpers (_synthetic.py, _dist_worker.py) import by file name under --import-mode=importlib.
sys.path.insert(0, str(pathlib.Path(__file__).parent))
