"""Fused CUDA kernels against CuPy op by op, on the GPU.

    python benchmarks/gpu_bench.py              # needs a GPU; under 5 minutes
    python benchmarks/gpu_bench.py --cpu-check  # no GPU: run every case on the CPU harness against numpy

For each case the fused program (a .cu source and its kernels.json
manifest) runs through the GPU runtime, replayed as a CUDA graph, and the
same computation runs as CuPy operations one by one. The table gives median
GPU times, their ratio, the fused program's effective bandwidth against the
device's peak (compiler/hardware.py) and its kernel count. Without a GPU it
says so and exits 0.

Today's cases are the hand-written kernels of tests/runtime/cuda/fixtures.
A generated program plugs in as one more `Case`: its kernels.cu, its
kernels.json, inputs, and a reference written against the array API that
numpy and CuPy share (it is the op-by-op baseline on the GPU and the check
on the CPU).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from fusecc.compiler.hardware import HARDWARE
from fusecc.runtime.cuda.execute import run_on_cpu
from fusecc.runtime.cuda.manifest import Launch, Manifest, ScalarArg, TensorArg, TensorSpec

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "runtime" / "cuda" / "fixtures"
TIME_BUDGET_S = 240.0


@dataclass
class Case:
    name: str
    source: str
    manifest: Manifest
    inputs: dict[str, np.ndarray]
    reference: Callable  # (xp, inputs) -> {output name: array}
    rtol: float = 1e-5

    @property
    def bytes_moved(self) -> int:
        """The least DRAM traffic: every input read once, every output written once."""
        return sum(s.nbytes for s in (*self.manifest.inputs, *self.manifest.outputs))


def _program(source: str, kernel: str, grid, block, inputs, outputs, scalars=(), shared_bytes=0) -> Manifest:
    args = [TensorArg("input", s.name) for s in inputs] + [TensorArg("output", s.name) for s in outputs]
    args += [ScalarArg(v, "i32") for v in scalars]
    return Manifest(source, tuple(inputs), tuple(outputs), (Launch(kernel, grid, block, tuple(args), shared_bytes),))


def softmax_case(rows: int, cols: int, rng) -> Case:
    block = 256
    spec = lambda name: TensorSpec(name, (rows, cols), "f32")

    def reference(xp, inputs):
        e = xp.exp(inputs["x"] - inputs["x"].max(axis=1, keepdims=True))
        return {"y": e / e.sum(axis=1, keepdims=True)}

    manifest = _program("softmax_rows.cu", "softmax_rows", (rows,), (block,), [spec("x")], [spec("y")], [cols], block // 32 * 4)
    return Case(f"softmax {rows}x{cols}", (FIXTURES / "softmax_rows.cu").read_text(), manifest, {"x": rng.standard_normal((rows, cols), np.float32)}, reference)


def elementwise_case(n: int, rng) -> Case:
    def reference(xp, inputs):
        v = inputs["x"]
        return {"out": xp.maximum(v / (1 + xp.exp(-v)) + xp.tanh(v) / xp.sqrt(v * v + 1), 0)}

    spec = lambda name: TensorSpec(name, (n,), "f32")
    manifest = _program("elementwise.cu", "silu_tanh_rsqrt", (math.ceil(n / 256),), (256,), [spec("x")], [spec("out")], [n])
    return Case(f"silu+tanh*rsqrt {n}", (FIXTURES / "elementwise.cu").read_text(), manifest, {"x": rng.standard_normal(n, np.float32)}, reference)


def row_sum_case(rows: int, cols: int, rng) -> Case:
    def reference(xp, inputs):
        return {"out": inputs["x"].sum(axis=1)}

    manifest = _program("block_reduce.cu", "row_sum", (rows,), (256,), [TensorSpec("x", (rows, cols), "f32")], [TensorSpec("out", (rows,), "f32")], [cols])
    return Case(f"row sum {rows}x{cols}", (FIXTURES / "block_reduce.cu").read_text(), manifest, {"x": rng.standard_normal((rows, cols), np.float32)}, reference, rtol=1e-4)


def matmul_case(m: int, n: int, k: int, rng) -> Case:
    def reference(xp, inputs):
        return {"c": inputs["a"] @ inputs["b"]}

    specs = [TensorSpec("a", (m, k), "f32"), TensorSpec("b", (k, n), "f32")]
    manifest = _program("matmul_tiled.cu", "matmul_tiled", (math.ceil(n / 16), math.ceil(m / 16)), (16, 16), specs, [TensorSpec("c", (m, n), "f32")], [m, n, k])
    inputs = {"a": rng.standard_normal((m, k), np.float32), "b": rng.standard_normal((k, n), np.float32)}
    return Case(f"matmul {m}x{n}x{k}", (FIXTURES / "matmul_tiled.cu").read_text(), manifest, inputs, reference, rtol=1e-3)


def cases(small: bool) -> list[Case]:
    rng = np.random.default_rng(0)
    if small:
        return [softmax_case(8, 300, rng), elementwise_case(5000, rng), row_sum_case(6, 1000, rng), matmul_case(37, 29, 45, rng)]
    return [softmax_case(8192, 1024, rng), elementwise_case(1 << 24, rng), row_sum_case(8192, 4096, rng), matmul_case(2048, 2048, 2048, rng)]


def max_error(got, expected) -> float:
    """The largest difference, relative to the largest expected magnitude."""
    expected = np.asarray(expected, dtype=np.float64)
    return float(np.max(np.abs(np.asarray(got, dtype=np.float64) - expected)) / max(float(np.max(np.abs(expected))), 1.0))


def cpu_check() -> int:
    """Run each (small) case on the CPU harness against its numpy reference."""
    failures = 0
    for case in cases(small=True):
        outputs = run_on_cpu(case.manifest, case.source, case.inputs)
        expected = case.reference(np, {k: v.astype(np.float64) for k, v in case.inputs.items()})
        errors = [max_error(outputs[name], value) for name, value in expected.items()]
        ok = max(errors) <= case.rtol
        failures += not ok
        print(f"{case.name:<28} {'ok' if ok else 'MISMATCH'}  max rel error {max(errors):.2e}")
    return 1 if failures else 0


def device_hardware(name: str):
    for key, hardware in HARDWARE.items():
        if hardware.is_gpu and key in name.lower().replace(" ", ""):
            return hardware
    return None


def gpu_bench() -> int:
    import cupy
    from cupyx.profiler import benchmark

    from fusecc.runtime.cuda.runtime import CudaRuntime

    runtime = CudaRuntime()
    device_name = cupy.cuda.runtime.getDeviceProperties(runtime.device.id)["name"].decode()
    hardware = device_hardware(device_name)
    peak = hardware.memory_bandwidth if hardware else None
    print(f"device: {device_name} ({runtime.arch}); peak bandwidth {peak / 1e9:.0f} GB/s" if peak else f"device: {device_name} ({runtime.arch}); peak unknown")
    print(f"{'case':<28} {'fused ms':>9} {'cupy ms':>9} {'ratio':>7} {'GB/s':>7} {'of peak':>8} {'kernels':>8}")
    started = time.perf_counter()
    for case in cases(small=False):
        if time.perf_counter() - started > TIME_BUDGET_S:
            print(f"{case.name:<28} skipped: over the time budget")
            continue
        program = runtime.prepare(case.manifest, case.source)
        device_inputs = {name: program.bound.tensors[name] for name in case.inputs}
        fused_out = program(case.inputs)
        expected = case.reference(cupy, device_inputs)
        error = max(max_error(fused_out[name], cupy.asnumpy(value)) for name, value in expected.items())
        if error > case.rtol:
            print(f"{case.name:<28} MISMATCH against CuPy: max error {error:.2e}")
            continue
        program.capture_graph()
        with runtime.stream:  # the events that time a run must be on the stream it runs on
            fused = np.median(benchmark(program.launch, (), n_repeat=50, n_warmup=5).gpu_times[0])
            baseline = np.median(benchmark(case.reference, (cupy, device_inputs), n_repeat=50, n_warmup=5).gpu_times[0])
        gbps = case.bytes_moved / fused / 1e9
        of_peak = f"{gbps * 1e9 / peak:7.0%}" if peak else "    n/a"
        print(f"{case.name:<28} {fused * 1e3:9.3f} {baseline * 1e3:9.3f} {baseline / fused:7.2f} {gbps:7.0f} {of_peak:>8} {len(case.manifest.launches):8d}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-check", action="store_true", help="run the cases on the CPU harness against numpy")
    args = parser.parse_args(argv)
    if args.cpu_check:
        return cpu_check()
    from fusecc.runtime.cuda.runtime import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is not None:
        print(f"gpu_bench: no CUDA GPU here ({reason}); nothing to measure. `--cpu-check` runs the cases on the CPU.")
        return 0
    return gpu_bench()


if __name__ == "__main__":
    sys.exit(main())
