"""The seeded sketch: Triton kernel vs torch reference (odd sizes, interpreter), its statistics."""

import math

import pytest
import torch
from scipy import stats

from shared_core import kernels as K
from trak_theory.kernels import (
    sketch_block_reference,
    sketch_block_triton,
    sketch_project,
    sketch_project_reference,
    sketch_project_triton,
)

needs_triton = pytest.mark.skipif(
    not (K.HAS_TRITON and (K.interpreting() or torch.cuda.is_available())),
    reason="needs Triton with a GPU or TRITON_INTERPRET=1",
)
DEV = "cuda" if torch.cuda.is_available() else "cpu"


@needs_triton
@pytest.mark.parametrize(("row0", "rows", "k"), [(0, 1, 1), (5, 37, 45), (2**31 - 7, 19, 33)])
def test_rademacher_block_is_bit_identical(row0, rows, k):
    for seed in (0, 12345678901):
        ref = sketch_block_reference(seed, row0, rows, k, "rademacher")
        tri = sketch_block_triton(seed, row0, rows, k, "rademacher", device=DEV).cpu()
        assert torch.equal(ref, tri)


@needs_triton
def test_gaussian_block_matches_to_ulps():
    ref = sketch_block_reference(3, 11, 41, 29, "gaussian")
    tri = sketch_block_triton(3, 11, 41, 29, "gaussian", device=DEV).cpu()
    torch.testing.assert_close(tri, ref, rtol=1e-5, atol=1e-5)


def _brute(g, seed, k, kind, row_offset=0):
    s = sketch_block_reference(seed, row_offset, g.shape[1], k, kind).to(torch.float64)
    return g.to(torch.float64) @ s / math.sqrt(k)


@needs_triton
@pytest.mark.parametrize("kind", ["rademacher", "gaussian"])
@pytest.mark.parametrize(("n", "p", "k"), [(1, 17, 16), (19, 101, 45), (33, 70, 65)])
def test_fused_projection_matches_reference(gen, kind, n, p, k):
    g = torch.randn(n, p, generator=gen)
    tri = sketch_project_triton(g.to(DEV), 9, k, kind, row_offset=3).cpu()
    torch.testing.assert_close(tri.double(), _brute(g, 9, k, kind, 3), rtol=1e-4, atol=1e-4)


@needs_triton
def test_fused_projection_bf16_and_strided_input(gen):
    g = torch.randn(70, 23, generator=gen).t()  # non-contiguous rows
    tri = sketch_project_triton(g.to(DEV).to(torch.bfloat16), 1, 21, "rademacher").cpu()
    ref = _brute(g.to(torch.bfloat16).float(), 1, 21, "rademacher")
    torch.testing.assert_close(tri.double(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("block_rows", [1, 7, 4096])
def test_blockwise_reference_equals_one_shot(gen, block_rows):
    g = torch.randn(9, 53, generator=gen)
    out = sketch_project_reference(g, 4, 13, "gaussian", block_rows=block_rows)
    torch.testing.assert_close(out.double(), _brute(g, 4, 13, "gaussian"), rtol=1e-5, atol=1e-5)


def test_row_offset_selects_rows_of_one_matrix():
    full = sketch_block_reference(5, 0, 40, 8, "gaussian")
    torch.testing.assert_close(sketch_block_reference(5, 13, 9, 8, "gaussian"), full[13:22])


def test_sketch_entries_have_the_right_law():
    r = sketch_block_reference(21, 0, 400, 500, "rademacher").flatten().double()
    assert set(r.unique().tolist()) == {-1.0, 1.0}
    # mean of 2e5 signs: standard error 2.2e-3
    assert abs(float(r.mean())) < 5 * (1 / math.sqrt(r.numel()))
    z = sketch_block_reference(21, 0, 400, 500, "gaussian").flatten().double().numpy()
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert abs(stats.kurtosis(z)) < 0.05  # excess kurtosis 0 for a normal; se ~ 0.011


def test_distinct_seeds_and_columns_are_uncorrelated():
    a = sketch_block_reference(1, 0, 3000, 6, "rademacher").double()
    b = sketch_block_reference(2, 0, 3000, 6, "rademacher").double()
    corr_seeds = (a * b).mean(0)
    corr_cols = (a[:, :-1] * a[:, 1:]).mean(0)
    se = 1 / math.sqrt(3000)
    assert corr_seeds.abs().max() < 5 * se and corr_cols.abs().max() < 5 * se


@pytest.mark.parametrize("kind", ["rademacher", "gaussian"])
def test_johnson_lindenstrauss_by_monte_carlo(gen, kind):
    # Over independent seeds, <Pu, Pv> is unbiased for <u, v>, and ||Pu||^2/||u||^2 has variance
    # ~ 2/k (Gaussian: exactly 2/k; Rademacher: at most 2/k).
    p, k, reps = 200, 64, 200
    u, v = torch.randn(2, p, generator=gen, dtype=torch.float64)
    uv = torch.stack([u, v])
    ips, norms = [], []
    for s in range(reps):
        y = sketch_project_reference(uv, s, k, kind).double()
        ips.append(float(y[0] @ y[1]))
        norms.append(float(y[0] @ y[0] / (u @ u)))
    ips_t, norms_t = torch.tensor(ips), torch.tensor(norms)
    sd_ip = math.sqrt((float(u @ u) * float(v @ v) + float(u @ v) ** 2) / k)
    assert abs(float(ips_t.mean()) - float(u @ v)) < 4 * sd_ip / math.sqrt(reps)
    assert abs(float(norms_t.mean()) - 1) < 4 * math.sqrt(2 / k / reps)
    assert float(norms_t.var()) < 1.3 * 2 / k


def test_op_dispatch_and_opcheck(gen):
    g = torch.randn(5, 31, generator=gen)
    assert torch.equal(
        torch.ops.trak_theory.sketch_project(g, 3, 7, "rademacher", 0),
        sketch_project_reference(g, 3, 7, "rademacher"),
    )
    torch.library.opcheck(sketch_project, (g, 3, 7, "gaussian", 2))


@pytest.mark.slow
def test_op_under_torch_compile(gen):
    g = torch.randn(5, 31, generator=gen)
    f = torch.compile(lambda a: sketch_project(a * 2.0, 3, 7, "rademacher", 0) + 1.0)
    torch.testing.assert_close(f(g), sketch_project_reference(g * 2.0, 3, 7, "rademacher") + 1.0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="kind"):
        sketch_block_reference(0, 0, 3, 3, "uniform")
    with pytest.raises(ValueError, match="seed"):
        sketch_block_reference(-1, 0, 3, 3)
    with pytest.raises(ValueError, match="k must"):
        sketch_project_reference(torch.randn(2, 3), 0, 0)
    with pytest.raises(ValueError, match="2-D"):
        sketch_project_reference(torch.randn(3), 0, 2)


@needs_triton
def test_kernel_spec_example_runs_launcher_against_reference(gen):
    from trak_theory.kernels import KERNELS

    spec = KERNELS["sketch_project"]
    args = spec.example(torch.device(DEV), torch.float32, gen)
    out = spec.launcher(*args).cpu().double()
    ref = spec.reference(*[a.cpu() if torch.is_tensor(a) else a for a in args]).double()
    assert float((out - ref).norm() / ref.norm()) < spec.rtol[torch.float32] * 10


@pytest.mark.parametrize("kind", ["rademacher", "gaussian"])
def test_cpu_hash_matches_int64_torch_hash(gen, kind):
    # the numpy uint32 path against the int64 torch path, bit for bit
    from trak_theory.kernels.sketch import (
        _GAUSS_SALT,
        _TWO_PI,
        _hash_block_torch,
        _mix_t,
        seed_words,
    )

    for _ in range(3):
        seed = int(torch.randint(0, 2**62, (1,), generator=gen))
        row0 = int(torch.randint(0, 2**31, (1,), generator=gen))
        rows, k = (int(v) for v in torch.randint(1, 90, (2,), generator=gen))
        h = _hash_block_torch(*seed_words(seed), row0, rows, k, "cpu")
        if kind == "rademacher":
            ref = (1 - 2 * (h >> 31)).to(torch.float32)
        else:
            u1 = ((h >> 8).to(torch.float32) + 0.5) * (2.0**-24)
            u2 = (_mix_t(h ^ _GAUSS_SALT) >> 8).to(torch.float32) * (2.0**-24)
            ref = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(_TWO_PI * u2)
        got = sketch_block_reference(seed, row0, rows, k, kind)
        assert torch.equal(got, ref)
