"""The GPU runtime and every example through `fusecc run --target cuda`
against the reference (skipped without a GPU), the cuda target's message
on a machine without one, and benchmarks/gpu_bench.py's dry run."""

from __future__ import annotations

import math
import sys

from pathlib import Path

import numpy as np
import pytest

from fusecc.tools.fusecc import main as fusecc_main

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.ir"))

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
    from fusecc.passes.backends.cuda.manifest import Launch, Manifest, ScalarArg, TensorArg, TensorSpec
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

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu_bench.py"
    spec = importlib.util.spec_from_file_location("gpu_bench", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_gpu_bench_dry_run_compiles_and_checks_every_pattern(monkeypatch, cuda_cache_dir, capsys):
    from fusecc.runtime.cuda.runtime import gpu_unavailable_reason

    bench = _load_bench()
    monkeypatch.setenv("FUSECC_CACHE_DIR", str(cuda_cache_dir))
    assert bench.main(["--dry-run", "--tiny"]) == 0
    out = capsys.readouterr().out
    for pattern in bench.PATTERNS:
        (line,) = [line for line in out.splitlines() if line.startswith(pattern.name + " ")]
        assert " ok (" in line, line
    # flash attention's one allocation grows linearly in S; the scores would grow as S^2
    rows = [bench.memory_row(s, manifest) for s, manifest, _ in bench.attention_programs("sm_90", (64, 128, 256))]
    assert len({total / s for s, _, total, _ in rows}) == 1
    assert rows[-1][3] / rows[0][3] == 16
    if gpu_unavailable_reason() is not None:
        assert bench.main([]) == 0
        assert capsys.readouterr().out.startswith("gpu_bench: no CUDA GPU here")


def test_gpu_bench_captures_both_contenders_and_interleaves_their_replays():
    """The GPU timing loop, on stand-ins for CuPy's stream and events: each
    contender is captured once after an eager call, every round replays each
    once with the first one rotating, and each replay has its own events."""
    from types import SimpleNamespace

    bench = _load_bench()
    assert bench.interleaved_rounds(["a", "b", "c"], 4) == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    log: list[str] = []

    class Stream:
        capturing = False

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def synchronize(self):
            assert not self.capturing
            log.append("sync")

        def begin_capture(self):
            self.capturing = True

        def end_capture(self):
            self.capturing = False
            return "graph"

    stream = Stream()
    calls = []
    graph, result = bench.capture(stream, lambda: calls.append(stream.capturing) or len(calls))
    assert (graph, result, calls) == ("graph", 2, [False, True])  # eager first, then captured

    class Event:
        clock = 0

        def record(self, on):
            assert on is stream
            Event.clock += 1
            self.at = Event.clock

    fake_cupy = SimpleNamespace(cuda=SimpleNamespace(Event=Event, get_elapsed_time=lambda start, end: float(end.at - start.at)))  # ms
    replays = {"fused": lambda: log.append("fused"), "cupy": lambda: log.append("cupy")}
    times = bench.interleaved_gpu_times(fake_cupy, stream, replays, rounds=3, warmup=1)
    assert log[-1] == "sync" and log[1:-1] == ["fused", "cupy", "fused", "cupy", "cupy", "fused", "fused", "cupy"]
    assert times == {"fused": [1e-3] * 3, "cupy": [1e-3] * 3}


@pytest.mark.cuda
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_examples_match_the_reference_on_the_gpu(example):
    """`fusecc run --target cuda` on every example: the generated program on
    the device gives the reference's numbers (fma and CUDA's math library
    move the last bits; sums of up to 3072 products, so 1e-4 normwise)."""
    from fusecc.compiler import parse_module, verify
    from fusecc.compiler.diagnostics import DiagnosticEngine
    from fusecc.driver.cuda_target import CudaTarget
    from fusecc.driver.inputs import random_input_with_shrunk_weights
    from fusecc.runtime.reference import evaluate

    text = example.read_text()
    reference = parse_module(text, example.name)
    verify(reference)
    func = reference.lookup("main") or reference.functions()[0]
    rng = np.random.default_rng(0)
    inputs = [random_input_with_shrunk_weights(t, rng) for t in func.function_type.inputs]
    expected = evaluate(reference, func.sym_name, inputs)
    module = parse_module(text, example.name)
    verify(module)
    got = CudaTarget().run(module, func.sym_name, inputs, DiagnosticEngine())
    for want, have in zip(expected, got, strict=True):
        scale = float(np.max(np.abs(want)))
        np.testing.assert_allclose(np.asarray(have, np.float64), np.asarray(want, np.float64), rtol=0, atol=1e-4 * scale)
