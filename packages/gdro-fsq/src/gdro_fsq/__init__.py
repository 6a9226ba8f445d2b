"""Anytime group distributionally robust optimization with flexible sample queries.

Example:
    >>> from gdro_fsq import GDROFSQ, GroupSampler, ConstantSize
    >>> ConstantSize(2, n_groups=4)(1)
    2
"""

from importlib.metadata import PackageNotFoundError, version

from .data import Batch, GroupSampler
from .optim import ERM, GDROFSQ, GroupGame, OneSampleBandit, Query, SagawaGDRO, SMDFullInfo
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
    "SMDFullInfo",
    "SagawaGDRO",
    "SizeSchedule",
    "__version__",
]
