"""The benchmark harness: what it measures, what it writes, and what it refuses."""

import json
import time

import pytest
import torch

from shared_core.bench import (
    ComparisonResult,
    blas_info,
    compare,
    cpu_info,
    environment,
    gemm_throughput,
    markdown_table,
    time_fn,
    write_json,
)


def _sleeper(seconds):
    return lambda: time.sleep(seconds)


def test_time_fn_measures_a_known_duration():
    stats = time_fn(_sleeper(0.01), warmup=1, repeats=5)
    assert len(stats.times_s) == 5
    assert 0.009 <= stats.median_s < 0.05
    assert stats.min_s <= stats.median_s <= stats.max_s
    assert stats.peak_mem_bytes is not None and stats.peak_mem_bytes > 0


def test_compare_ratio_reflects_known_speeds():
    # A 20 ms candidate against a 60 ms baseline: the ratio must come out near 1/3. (Sleeps
    # long against the scheduler's wake-up latency, which adds to both sides on a busy host.)
    r = compare(_sleeper(0.020), _sleeper(0.060), name="sleep", warmup=1, repeats=6)
    assert isinstance(r, ComparisonResult)
    assert len(r.ratios) == 6
    assert 0.2 < r.ratio_median < 0.5
    assert r.ratio_min <= r.ratio_median <= r.ratio_max
    assert r.speedup == pytest.approx(1 / r.ratio_median)


def test_compare_interleaves_candidate_and_baseline():
    calls = []
    compare(lambda: calls.append("c"), lambda: calls.append("b"), name="o", warmup=0, repeats=4)
    assert calls == ["c", "b", "b", "c", "c", "b", "b", "c"]


def test_write_json_records_environment_and_results(tmp_path):
    x = torch.randn(33, 17)
    r = compare(lambda: x @ x.T, lambda: x @ x.T, name="mm", warmup=1, repeats=3, threads=1)
    path = write_json(tmp_path / "sub" / "bench.json", [r], command="pytest")
    doc = json.loads(path.read_text())
    env = doc["environment"]
    for key in ("torch", "triton", "device", "torch_threads", "git_commit", "python"):
        assert key in env
    assert doc["command"] == "pytest"
    assert doc["results"][0]["name"] == "mm"
    assert len(doc["results"][0]["ratios"]) == 3
    assert "mm" in markdown_table([r])


def test_threads_are_pinned_and_restored():
    before = torch.get_num_threads()
    seen = []
    time_fn(lambda: seen.append(torch.get_num_threads()), warmup=0, repeats=2, threads=1)
    assert seen == [1, 1]
    assert torch.get_num_threads() == before


def test_environment_describes_the_device():
    assert environment("cpu")["device"] == "cpu"


def test_cpu_info_reads_the_model_and_the_gemm_flags():
    text = (
        "processor\t: 0\nmodel name\t: AMD EPYC 9B14 96-Core Processor\n"
        "flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 avx512vl\n"
    )
    info = cpu_info(text)
    assert info == {
        "model": "AMD EPYC 9B14 96-Core Processor",
        "flags": ["avx2", "fma", "avx512f", "avx512_bf16"],
    }
    assert cpu_info("")["flags"] == []


def test_blas_info_reads_torch_build_config():
    cfg = (
        "  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605\n"
        "  - CPU capability usage: AVX512\n"
        "  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, LAPACK_INFO=mkl, X=2.9\n"
    )
    info = blas_info(cfg)
    assert (info["blas"], info["lapack"], info["mkl_version"]) == ("mkl", "mkl", "2024.2")
    assert info["cpu_capability"] == "AVX512"
    openblas = blas_info("OpenBLAS 0.3.27\nBuild settings: BLAS_INFO=open, LAPACK_INFO=open,")
    assert (openblas["blas"], openblas["openblas_version"]) == ("open", "0.3.27")
    assert blas_info()["blas"]  # this torch reports one


def test_gemm_probe_measures_positive_throughput_within_its_time():
    t0 = time.perf_counter()
    g = gemm_throughput("cpu", seconds=0.2, n=96)
    assert set(g) == {"float32", "bfloat16"} and all(v > 0 for v in g.values())
    assert time.perf_counter() - t0 < 5.0  # a probe, not a benchmark


def test_write_json_records_the_machine(tmp_path):
    path = write_json(tmp_path / "r.json", [{"name": "x"}], probe=False, command="c")
    env = json.loads(path.read_text())["environment"]
    assert {"cpu", "blas", "thread_env", "torch_threads"} <= set(env) and "gemm_gflops" not in env


@pytest.mark.parametrize("repeats", [0, -1, 2.5, True])
def test_bad_repeats(repeats):
    with pytest.raises(ValueError, match="repeats"):
        time_fn(lambda: None, repeats=repeats)


def test_bad_warmup():
    with pytest.raises(ValueError, match="warmup"):
        compare(lambda: None, lambda: None, name="x", warmup=-1)


def test_missing_baseline():
    with pytest.raises(ValueError, match="baseline is missing"):
        compare(lambda: None, None, name="x")


def test_non_callable_candidate():
    with pytest.raises(ValueError, match="candidate must be a zero-argument callable"):
        compare(3, lambda: None, name="x")


@pytest.mark.parametrize("device", ["tpu", "not-a-device", "meta"])
def test_unknown_device(device):
    with pytest.raises(ValueError, match="device"):
        time_fn(lambda: None, device=device)


def test_cuda_requested_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="no CUDA device"):
        compare(lambda: None, lambda: None, name="x", device="cuda")


def test_bad_threads_and_name():
    with pytest.raises(ValueError, match="threads"):
        time_fn(lambda: None, threads=0)
    with pytest.raises(ValueError, match="name"):
        compare(lambda: None, lambda: None, name="")


def test_write_json_wants_a_list(tmp_path):
    r = time_fn(lambda: None, repeats=1)
    with pytest.raises(ValueError, match="list"):
        write_json(tmp_path / "x.json", r)
    with pytest.raises(ValueError, match="cannot write"):
        write_json(tmp_path / "x.json", [object()])


@pytest.mark.gpu
def test_cuda_events_time_device_work():
    x = torch.randn(2048, 2048, device="cuda")
    stats = time_fn(lambda: x @ x, device="cuda", repeats=5)
    assert stats.median_s > 0 and stats.peak_mem_bytes > 0
