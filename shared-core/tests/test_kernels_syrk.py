"""The SYRK kernel (X X^T, lower blocks mirrored) against float64 references, every layer."""

import pytest
import torch

from shared_core import kernels as K
from shared_core.kernels import syrk, syrk_reference, syrk_triton

needs_triton = pytest.mark.skipif(
    not (K.HAS_TRITON and (K.interpreting() or torch.cuda.is_available())),
    reason="needs Triton with a GPU or TRITON_INTERPRET=1",
)
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
RTOL = K.KERNELS["syrk"].rtol


def _device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def _rel(out, ref):
    out, ref = out.double().cpu(), ref.double().cpu()
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


@needs_triton
@pytest.mark.parametrize("shape", [(17, 33), (45, 19), (70, 5), (3, 45, 19), (2, 2, 33, 17)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_matches_float64_reference(shape, dtype, gen):
    # No size is a multiple of a block: masked row and k tails, several row blocks (the
    # interpreter's tile is 32), mirrored off-diagonal blocks, batch dimensions.
    x = torch.randn(shape, generator=gen).to(dtype=dtype, device=_device())
    out = syrk_triton(x)
    assert out.dtype == dtype and out.shape == (*shape[:-1], shape[-2])
    assert _rel(out, syrk_reference(x.double())) <= RTOL[dtype]
    assert torch.equal(out, out.mT)  # exactly symmetric: each element written once


@needs_triton
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_output_element_is_written(dtype, gen):
    x = torch.randn(2, 70, 19, generator=gen).to(dtype=dtype, device=_device())
    out = torch.full((2, 70, 70), float("nan"), dtype=dtype, device=_device())
    res = syrk_triton(x, out=out)
    assert res.data_ptr() == out.data_ptr()
    assert not torch.isnan(out).any()
    assert _rel(out, syrk_reference(x.double())) <= RTOL[dtype]


@needs_triton
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_epilogue_is_b_a_plus_c_a_squared(dtype, gen):
    x = torch.randn(45, 30, generator=gen, dtype=torch.float64)
    x = x / torch.linalg.matrix_norm(x)
    A = syrk_reference(x).to(dtype=dtype, device=_device())
    b, c = -4.775, 2.0315
    out = torch.full_like(A, float("nan"))  # poisoned: the epilogue path must write it all
    syrk_triton(A, alpha=c, beta=b, c=A, out=out)
    A64 = A.double()
    assert _rel(out, c * A64 @ A64 + b * A64) <= RTOL[dtype]
    assert torch.equal(out, out.mT)


@needs_triton
def test_non_contiguous_input(gen):
    x = torch.randn(19, 45, generator=gen).to(_device()).T  # a (45, 19) transposed view
    assert not x.is_contiguous()
    assert _rel(syrk_triton(x), syrk_reference(x.double())) <= RTOL[torch.float32]


@needs_triton
def test_registry_example_through_the_launcher(gen):
    # What tools/gpu_check.py does per dtype; here once, in the GPU default bfloat16.
    dtype = torch.bfloat16
    spec = K.KERNELS["syrk"]
    (x,) = spec.example(torch.device(_device()), dtype, gen)
    assert float((x != 0).double().mean()) > 0.99  # random entries, never a zero input
    assert _rel(spec.launcher(x), spec.reference(x.double())) <= spec.rtol[dtype]


@needs_triton
def test_launcher_argument_checks(gen):
    x = torch.randn(6, 4, generator=gen).to(_device())
    with pytest.raises(ValueError, match="c must be"):
        syrk_triton(x, c=torch.zeros(5, 5, device=_device()))
    with pytest.raises(ValueError, match="out must be"):
        syrk_triton(x, out=torch.empty(6, 5, device=_device()))
    with pytest.raises(ValueError, match="supports float32, bfloat16 and float16"):
        syrk_triton(x.double())


def test_launcher_rejects_cpu_tensor_without_interpreter(monkeypatch, gen):
    if not K.HAS_TRITON:
        pytest.skip("no Triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="CUDA tensors"):
        syrk_triton(torch.randn(4, 3, generator=gen))


def test_op_dispatch_and_opcheck(gen):
    x = torch.randn(3, 11, 7, generator=gen)
    torch.testing.assert_close(torch.ops.shared_core.syrk(x), syrk_reference(x))
    torch.library.opcheck(syrk, (x,))


def test_op_under_torch_compile(gen):
    x = torch.randn(12, 20, generator=gen)

    def gram_trace(v):
        return syrk(v * 0.5).diagonal().sum() + 1.0

    compiled = torch.compile(gram_trace, fullgraph=True)
    torch.testing.assert_close(compiled(x), gram_trace(x))


def test_op_rejects_bad_input(gen):
    with pytest.raises(ValueError, match=r"shape \(\.\.\., m, k\)"):
        syrk(torch.randn(5, generator=gen))
    with pytest.raises(ValueError, match="floating-point"):
        syrk(torch.ones(3, 3, dtype=torch.int32))
    x64 = torch.randn(4, 6, generator=gen, dtype=torch.float64)  # float64: the reference
    torch.testing.assert_close(syrk(x64), x64 @ x64.T)


def test_registry_entry():
    spec = K.KERNELS["syrk"]
    assert (spec.op, spec.reference, spec.launcher) == (syrk, syrk_reference, syrk_triton)
    assert hasattr(torch.ops.shared_core, "syrk")
