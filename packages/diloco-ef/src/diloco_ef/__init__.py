"""LA, SLA, DiLoCo and DiLoCo with error-feedback compression on torch.distributed.

Example:
    >>> import torch
    >>> from diloco_ef import DiLoCo, TopK
    >>> algo = DiLoCo(torch.nn.Linear(4, 1), lambda p: torch.optim.SGD(p, lr=0.05),
    ...               lambda p: torch.optim.SGD(p, lr=0.7, momentum=0.9, nesterov=True),
    ...               inner_steps=4, num_workers=2, compressor=TopK(ratio=0.4))
    >>> x = torch.randn(16, 4)
    >>> rec = algo.round(lambda m, w, r, h: (m(x) ** 2).mean())
    >>> rec["bits"] < 2 * 5 * 32  # two workers, 2 of 4 weights + the bias, with indices
    True
"""

from importlib.metadata import PackageNotFoundError, version

from .algorithms import (
    LA,
    DiLoCo,
    NonFiniteRoundError,
    local_step_size,
    local_step_size_schedule,
    sla,
)
from .comm import (
    Communicator,
    LocalCommunicator,
    PeerFailureError,
    TorchDistCommunicator,
    init_distributed,
)
from .compressors import (
    QSGD,
    AbsmaxQuant,
    ApproxTopK,
    Compressor,
    Identity,
    Int8Absmax,
    LowRank,
    Payload,
    RandomK,
    ScaledSign,
    TopK,
    contraction,
    index_bits,
    qsgd_expected_alpha,
    topk_recall,
)
from .error_feedback import EFSGD, ErrorFeedback, Sent
from .hook import DiLoCoHook
from .powersgd import PowerSGD
from .shared_scale import SharedScaleQuant
from .wire import ByteMeter

try:
    __version__ = version("diloco-ef")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = [
    "EFSGD",
    "LA",
    "QSGD",
    "AbsmaxQuant",
    "ApproxTopK",
    "ByteMeter",
    "Communicator",
    "Compressor",
    "DiLoCo",
    "DiLoCoHook",
    "ErrorFeedback",
    "Identity",
    "Int8Absmax",
    "LocalCommunicator",
    "LowRank",
    "NonFiniteRoundError",
    "Payload",
    "PeerFailureError",
    "PowerSGD",
    "RandomK",
    "ScaledSign",
    "Sent",
    "SharedScaleQuant",
    "TopK",
    "TorchDistCommunicator",
    "__version__",
    "contraction",
    "index_bits",
    "init_distributed",
    "local_step_size",
    "local_step_size_schedule",
    "qsgd_expected_alpha",
    "sla",
    "topk_recall",
]
