"""Anytime group distributionally robust optimization with flexible sample queries.

Example:
    >>> from gdro_fsq import GDROFSQ, GroupSampler, ConstantSize
    >>> ConstantSize(2, n_groups=4)(1)
    2
"""

from importlib.metadata import PackageNotFoundError, version

from .baselines import ERM, OneSampleBandit, SagawaGDRO, SMDFullInfo
from .data import Batch, GroupSampler
from .fsq import GDROFSQ
from .game import GroupGame, Query, RoundWeights
from .schedules import CallbackSize, ConstantSize, IncreasingSize, RandomSize, SizeSchedule

try:
    __version__ = version("gdro-fsq")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = [
    "ERM",
    "GDROFSQ",
    "Batch",
    "CallbackSize",
    "ConstantSize",
    "GroupGame",
    "GroupSampler",
    "IncreasingSize",
    "OneSampleBandit",
    "Query",
    "RandomSize",
    "RoundWeights",
    "SMDFullInfo",
    "SagawaGDRO",
    "SizeSchedule",
    "__version__",
]
