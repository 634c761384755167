"""The GPU runtime (skipped without a GPU) and the cuda target's message
on a machine without one."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from fusecc.tools.fusecc import main as fusecc_main

TINY = """\
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.exp %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""


def test_cuda_target_without_a_usable_gpu_points_to_the_cpu(tmp_path, capsys):
    program = tmp_path / "tiny.ir"
    program.write_text(TINY)
    assert fusecc_main(["run", str(program), "--target", "cuda", "--random-inputs"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fusecc run: error: target 'cuda'") and "use --target cpu" in err
    assert "Traceback" not in err


@pytest.mark.cuda
def test_gpu_runs_the_triple_with_and_without_a_graph(cuda_source, tmp_path):
    from fusecc.runtime.cuda.manifest import Launch, Manifest, ScalarArg, TensorArg, TensorSpec
    from fusecc.runtime.cuda.runtime import CudaRuntime

    rows, cols, block = 64, 1000, 256
    manifest = Manifest(
        source="softmax_rows.cu",
        inputs=(TensorSpec("x", (rows, cols), "f32"),),
        outputs=(TensorSpec("y", (rows, cols), "f32"),),
        launches=(Launch("softmax_rows", (rows,), (block,), (TensorArg("input", "x"), TensorArg("output", "y"), ScalarArg(cols, "i32")), block // 32 * 4),),
    )
    runtime = CudaRuntime(cache_dir=tmp_path)
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    expected = e / e.sum(axis=1, keepdims=True)
    program = runtime.prepare(manifest, cuda_source("softmax_rows.cu"))
    np.testing.assert_allclose(program({"x": x})["y"], expected, rtol=1e-5, atol=1e-7)
    assert len(list((tmp_path / "cubin").glob("*.cubin"))) == 1

    program.capture_graph()
    program.set_inputs({"x": -x})
    program.launch()
    e = np.exp(-x - (-x).max(axis=1, keepdims=True))
    np.testing.assert_allclose(program.outputs()["y"], e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.cuda
def test_gpu_tiled_matmul_matches_the_cpu_harness(cuda_source, cpu_module, tmp_path):
    from fusecc.runtime.cuda.runtime import CudaRuntime

    import cupy

    M, N, K = 37, 29, 45
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    kernel = CudaRuntime(cache_dir=tmp_path).module(cuda_source("matmul_tiled.cu"), "matmul_tiled.cu").get_function("matmul_tiled")
    c = cupy.zeros((M, N), cupy.float32)
    kernel((math.ceil(N / 16), math.ceil(M / 16)), (16, 16), (cupy.asarray(a), cupy.asarray(b), c, np.int32(M), np.int32(N), np.int32(K)))
    on_cpu = np.zeros((M, N), np.float32)
    cpu_module("matmul_tiled.cu").launch("matmul_tiled", (2, 3), (16, 16), [a, b, on_cpu, M, N, K])
    np.testing.assert_allclose(c.get(), on_cpu, rtol=1e-5, atol=1e-5)


def _load_bench():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu_bench.py"
    spec = importlib.util.spec_from_file_location("gpu_bench", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_gpu_bench_cases_check_out_on_the_cpu(monkeypatch, cuda_cache_dir, capsys):
    from fusecc.runtime.cuda.runtime import gpu_unavailable_reason

    bench = _load_bench()
    monkeypatch.setenv("FUSECC_CACHE_DIR", str(cuda_cache_dir))
    assert bench.main(["--cpu-check"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all(" ok " in line for line in lines)
    if gpu_unavailable_reason() is not None:
        assert bench.main([]) == 0
        assert capsys.readouterr().out.startswith("gpu_bench: no CUDA GPU here")
