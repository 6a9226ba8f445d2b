"""The stochastic-quantization kernel against its reference, on odd shapes under the interpreter."""

import pytest
import torch

from diloco_ef import QSGD
from diloco_ef.kernels import (
    stochastic_quantize,
    stochastic_quantize_reference,
    stochastic_quantize_triton,
)
from shared_core import kernels as K

needs_triton = pytest.mark.skipif(
    not (K.HAS_TRITON and (K.interpreting() or torch.cuda.is_available())),
    reason="needs Triton with a GPU or TRITON_INTERPRET=1",
)
DEV = "cuda" if torch.cuda.is_available() else "cpu"


@needs_triton
@pytest.mark.parametrize("shape", [(1,), (1025,), (3, 1001), (7, 13, 37)])
@pytest.mark.parametrize("levels", [1, 7, 255])
def test_triton_matches_reference_float32(gen, shape, levels):
    x = torch.randn(shape, generator=gen).to(DEV)
    u = torch.rand(shape, generator=gen).to(DEV)
    mult = levels / float(x.norm())
    out = stochastic_quantize_triton(x, u, mult, levels)
    ref = stochastic_quantize_reference(x, u, mult, levels)
    assert torch.equal(out, ref)
    assert float(out.abs().max()) <= levels


@needs_triton
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_triton_half_dtypes(gen, dtype):
    x = torch.randn(517, generator=gen).to(DEV, dtype)
    u = torch.rand(517, generator=gen).to(DEV, dtype)
    out = stochastic_quantize_triton(x, u, 3.0, 7)
    ref = stochastic_quantize_reference(x, u, 3.0, 7)
    assert out.dtype == dtype and torch.equal(out, ref)


@needs_triton
def test_triton_non_contiguous_and_zero(gen):
    x = torch.randn(33, 65, generator=gen).to(DEV).t()
    x[0, 0] = 0.0
    u = torch.rand(65, 33, generator=gen).to(DEV)
    out = stochastic_quantize_triton(x, u, 5.0, 15)
    assert torch.equal(out, stochastic_quantize_reference(x, u, 5.0, 15))
    assert out[0, 0] == 0


def test_reference_is_stochastic_rounding_by_hand():
    # r = 2.5 * |x|: 0.25 -> r=0.625, u=0.5 < 0.625 rounds up; -1.0 -> r=2.5, u=0.7 stays at 2;
    # 3.0 -> r=7.5 clamps at 3.
    x = torch.tensor([0.25, -1.0, 3.0], dtype=torch.float64)
    u = torch.tensor([0.5, 0.7, 0.0], dtype=torch.float64)
    assert stochastic_quantize_reference(x, u, 2.5, 3).tolist() == [1.0, -2.0, 3.0]


def test_op_dispatch_opcheck_and_validation(gen):
    x, u = torch.randn(5, 31, generator=gen), torch.rand(5, 31, generator=gen)
    assert torch.equal(
        torch.ops.diloco_ef.stochastic_quantize(x, u, 2.0, 3),
        stochastic_quantize_reference(x, u, 2.0, 3),
    )
    torch.library.opcheck(stochastic_quantize, (x, u, 2.0, 3))
    with pytest.raises(ValueError, match="one shape"):
        stochastic_quantize_reference(x, u[:, :3], 1.0, 1)
    with pytest.raises(ValueError, match="levels"):
        stochastic_quantize_reference(x, u, 1.0, 0)


def test_op_under_torch_compile(gen):
    x, u = torch.randn(17, 9, generator=gen), torch.rand(17, 9, generator=gen)
    f = torch.compile(lambda a, b: stochastic_quantize(a * 2.0, b, 1.5, 7) + 1.0, fullgraph=True)
    assert torch.equal(f(x, u), stochastic_quantize_reference(x * 2.0, u, 1.5, 7) + 1.0)


def test_qsgd_uses_the_op(gen):
    x = torch.randn(40, generator=gen)
    p = QSGD(bits=3).compress(x, torch.Generator().manual_seed(1))
    u = torch.rand(40, generator=torch.Generator().manual_seed(1))
    ref = stochastic_quantize_reference(x, u, 7 / float(x.norm()), 7)
    assert torch.equal(p.sent["levels"].float(), ref)
