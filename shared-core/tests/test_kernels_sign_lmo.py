"""The sign-LMO kernel against its torch reference, through every layer of the kernel path."""

import pytest
import torch

from shared_core import kernels as K
from shared_core.kernels import sign_lmo, sign_lmo_reference, sign_lmo_triton

needs_triton = pytest.mark.skipif(
    not (K.HAS_TRITON and (K.interpreting() or torch.cuda.is_available())),
    reason="needs Triton with a GPU or TRITON_INTERPRET=1",
)


def _device():
    return "cuda" if torch.cuda.is_available() else "cpu"


@needs_triton
@pytest.mark.parametrize("shape", [(1,), (1000,), (1025,), (3, 1001), (7, 13, 37), (4097,)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_triton_matches_reference(shape, dtype, gen):
    # Odd sizes that are no multiple of any block, so the masked tail is exercised.
    g = torch.randn(shape, generator=gen).to(dtype=dtype, device=_device())
    radius = 0.37
    out = sign_lmo_triton(g, radius)
    ref = sign_lmo_reference(g, radius)
    assert out.dtype == dtype and out.shape == g.shape
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


@needs_triton
def test_triton_writes_every_element(gen):
    g = torch.randn(2049, generator=gen).to(_device())
    out = sign_lmo_triton(g, 1.5)
    # Every entry of a random Gaussian is nonzero, so every output must be +-1.5.
    assert torch.all(out.abs() == 1.5)


@needs_triton
def test_triton_non_contiguous_and_special_values(gen):
    g = torch.randn(33, 65, generator=gen).to(_device()).t()  # non-contiguous view
    g[0, 0] = 0.0
    g[1, 1] = float("nan")
    out = sign_lmo_triton(g, 2.0)
    ref = sign_lmo_reference(g, 2.0)
    torch.testing.assert_close(out, ref, equal_nan=True, rtol=0, atol=0)
    assert out[0, 0] == 0 and torch.isnan(out[1, 1])


def test_reference_is_the_linf_lmo(gen):
    # <g, -r sign g> = -r ||g||_1 is the least value of <g, d> over the l-inf ball of radius r.
    g = torch.randn(257, generator=gen, dtype=torch.float64)
    d = sign_lmo_reference(g, 0.5)
    assert torch.isclose(g @ d, -0.5 * g.abs().sum())
    feasible = (torch.rand(2000, 257, generator=gen, dtype=torch.float64) * 2 - 1) * 0.5
    assert torch.all(feasible @ g >= g @ d)


def test_op_dispatch_and_opcheck(gen):
    g = torch.randn(5, 31, generator=gen)
    torch.testing.assert_close(torch.ops.shared_core.sign_lmo(g, 0.2), sign_lmo_reference(g, 0.2))
    torch.library.opcheck(sign_lmo, (g, 0.2))


def test_op_under_torch_compile(gen):
    g = torch.randn(17, 9, generator=gen)

    def step(x):
        return sign_lmo(x * 2.0, 0.5) + 1.0

    compiled = torch.compile(step, fullgraph=True)
    torch.testing.assert_close(compiled(g), step(g))


def test_launcher_rejects_cpu_tensor_without_interpreter(monkeypatch, gen):
    if not K.HAS_TRITON:
        pytest.skip("no Triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="CUDA tensors"):
        sign_lmo_triton(torch.randn(4, generator=gen), 1.0)


def test_kernel_registry_entries_are_consistent(gen):
    for name, spec in K.KERNELS.items():
        assert hasattr(torch.ops.shared_core, name)
        args = spec.example(torch.device("cpu"), torch.float64, gen)
        # The op on CPU is the reference, and the example draws no zeros-only tensors.
        torch.testing.assert_close(spec.op(*args), spec.reference(*args))
        assert all(a.abs().sum() > 0 for a in args if isinstance(a, torch.Tensor))
        assert set(spec.rtol) >= set(spec.dtypes)
