"""Test helpers shared by the packages.

- :mod:`.launch`: start local worker processes the way ``torchrun`` would (multi-process tests).
- :mod:`.placement`: catch tensors created on the default device by accident (CUDA bugs found
  on a CPU).
"""

from .launch import LaunchResult, WorkersHungError, free_port, launch_local
from .placement import DefaultDeviceFactories

__all__ = [
    "DefaultDeviceFactories",
    "LaunchResult",
    "WorkersHungError",
    "free_port",
    "launch_local",
]
