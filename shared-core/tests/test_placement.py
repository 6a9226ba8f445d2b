"""DefaultDeviceFactories records default-device factory calls, and only those."""

from __future__ import annotations

import pytest
import torch

from shared_core.testing import DefaultDeviceFactories


def _watched(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():  # a grad-mode switch makes no tensor: not recorded
        a = torch.arange(x.shape[0])  # recorded
        b = torch.arange(x.shape[0], device=x.device)  # names its device
        c = torch.zeros_like(x)  # made from a tensor
        d = torch.as_tensor(x)  # made from a tensor
        e = x.new_zeros(3)  # a method, made from a tensor
    return a + b + c + d + e[: x.shape[0]]


def test_records_exactly_the_factory_without_a_device():
    x = torch.randn(3)
    with DefaultDeviceFactories("test_placement") as mode:
        _watched(x)
    assert [line for _, _, line in mode.sites] == ["a = torch.arange(x.shape[0])  # recorded"]
    ((path, lineno, _),) = mode.sites
    assert path.endswith("test_placement.py") and lineno > 0


def test_other_files_are_not_watched():
    x = torch.randn(3)
    with DefaultDeviceFactories("/no/such/package/") as mode:
        _watched(x)
    assert mode.sites == set()


def test_rejects_an_empty_path_fragment():
    with pytest.raises(ValueError, match="where"):
        DefaultDeviceFactories("")


def test_the_modes_own_frame_is_never_recorded():
    # "/shared_core/" also matches this helper's file: only the caller's frames count
    x = torch.randn(3)
    with DefaultDeviceFactories("/shared_core/") as mode:
        _watched(x)
    assert mode.sites == set()  # _watched lives in tests/, not in shared_core/
