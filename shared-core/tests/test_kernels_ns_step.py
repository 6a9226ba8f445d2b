"""The Newton-Schulz step on SYRK kernels against float64 references, every layer."""

import pytest
import torch

from shared_core import kernels as K
from shared_core.kernels import ns_step, ns_step_reference, ns_step_triton

needs_triton = pytest.mark.skipif(
    not (K.HAS_TRITON and (K.interpreting() or torch.cuda.is_available())),
    reason="needs Triton with a GPU or TRITON_INTERPRET=1",
)
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
RTOL = K.KERNELS["ns_step"].rtol
MUON = (3.4445, -4.7750, 2.0315)
PE1 = (8.205160414005572, -22.90193498705604, 16.460724910180303)


def _device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def _rel(out, ref):
    out, ref = out.double().cpu(), ref.double().cpu()
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


def _normalised(shape, gen):
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    return x / torch.linalg.matrix_norm(x, keepdim=True)


@needs_triton
@pytest.mark.parametrize("shape", [(17, 33), (45, 19), (3, 19, 45)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("abc", [MUON, PE1], ids=["muon", "polar_express"])
def test_triton_matches_float64_reference(shape, dtype, abc, gen):
    x = _normalised(shape, gen).to(dtype=dtype, device=_device())
    out = ns_step_triton(x, *abc)
    assert out.dtype == dtype and out.shape == x.shape
    assert torch.isfinite(out).all()
    assert _rel(out, ns_step_reference(x.double(), *abc)) <= RTOL[dtype]


@needs_triton
def test_five_triton_steps_track_the_reference_iteration(gen):
    x = _normalised((40, 70), gen).float().to(_device())
    y_ref = x.double()
    y = x
    for _ in range(5):
        y = ns_step_triton(y, *MUON)
        y_ref = ns_step_reference(y_ref, *MUON)
    assert _rel(y, y_ref) <= 1e-5
    # ... and that iteration orthogonalises: singular values in Muon's band.
    sv = torch.linalg.svdvals(y.double().cpu())
    assert float(sv.min()) >= 0.6 and float(sv.max()) <= 1.25


@needs_triton
def test_registry_example_through_the_launcher(gen):
    # What tools/gpu_check.py does per dtype; here once, in the GPU default bfloat16.
    dtype = torch.bfloat16
    spec = K.KERNELS["ns_step"]
    args = spec.example(torch.device(_device()), dtype, gen)
    args64 = tuple(a.double() if torch.is_tensor(a) else a for a in args)
    assert _rel(spec.launcher(*args), spec.reference(*args64)) <= spec.rtol[dtype]


def test_reference_applies_the_quintic_to_singular_values(gen):
    x = _normalised((12, 20), gen)
    U, s, Vh = torch.linalg.svd(x, full_matrices=False)
    a, b, c = MUON
    want = (U * (a * s + b * s**3 + c * s**5)) @ Vh
    torch.testing.assert_close(ns_step_reference(x, a, b, c), want, atol=1e-13, rtol=0)
    xb = torch.stack([x, 2 * x])
    torch.testing.assert_close(ns_step_reference(xb, a, b, c)[0], want, atol=1e-13, rtol=0)


def test_launcher_rejects_cpu_tensor_without_interpreter(monkeypatch, gen):
    if not K.HAS_TRITON:
        pytest.skip("no Triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="CUDA tensors"):
        ns_step_triton(torch.randn(4, 6, generator=gen), *MUON)


def test_op_dispatch_and_opcheck(gen):
    x = _normalised((2, 9, 14), gen).float()
    torch.testing.assert_close(torch.ops.shared_core.ns_step(x, *MUON), ns_step_reference(x, *MUON))
    torch.library.opcheck(ns_step, (x, *MUON))
    torch.library.opcheck(ns_step, (x[0].bfloat16(), *PE1))


def test_op_under_torch_compile(gen):
    x = _normalised((10, 24), gen).float()

    def two_steps(v):
        return ns_step(ns_step(v, *PE1), *MUON) * 2.0

    compiled = torch.compile(two_steps, fullgraph=True)
    torch.testing.assert_close(compiled(x), two_steps(x))


def test_op_rejects_bad_input(gen):
    with pytest.raises(ValueError, match=r"shape \(\.\.\., m, k\)"):
        ns_step(torch.randn(5, generator=gen), *MUON)
    with pytest.raises(ValueError, match="floating-point"):
        ns_step(torch.ones(3, 4, dtype=torch.int32), *MUON)
    x64 = torch.randn(3, 4, generator=gen, dtype=torch.float64)  # float64: the reference
    torch.testing.assert_close(ns_step(x64, *MUON), ns_step_reference(x64, *MUON))
    if K.HAS_TRITON:
        with pytest.raises(ValueError, match="float32, bfloat16 and float16"):
            ns_step_triton(x64, *MUON)


def test_registry_entry():
    spec = K.KERNELS["ns_step"]
    assert (spec.op, spec.reference, spec.launcher) == (ns_step, ns_step_reference, ns_step_triton)
    assert hasattr(torch.ops.shared_core, "ns_step")
