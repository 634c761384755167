"""First contact with a GPU: one script, at most 8 minutes on an H200, that
leaves a folder of results even when a stage runs out of time.

    python benchmarks/gpu_check.py                    # on the lent GPU
    python benchmarks/gpu_check.py --dry-run          # here: builds everything, runs nothing on a device
    python benchmarks/gpu_check.py --out DIR --random 50

Stages, each with a time budget (seconds) and its own result file in --out,
written as it goes (a stage that runs out of time stops between programs and
says so; the next stage starts on time):

  environment   driver, GPU, CuPy, NVRTC and wheel majors, the driver check  environment.json
  build         every example and --random programs from the fuzzer        build.json
                (tools/fuzz) to kernels.cu + kernels.json for the device's
                arch, NVRTC-checked; shared memory per launch, opt-ins
  correctness   each program on the GPU against the reference, eagerly and  correctness.jsonl
                as a replayed CUDA graph (other inputs, so a stale replay shows)
  kernel_times  per launch: median CUDA-event time, GB/s of its arguments,  kernels.csv
                the share of the device's bandwidth
  fused_vs_cupy gpu_bench's patterns: the fused program vs CuPy op by op,   fused_vs_cupy.json
                both captured as graphs, interleaved replays
  gemm          matmuls vs cupy.matmul (cuBLAS), TFLOP/s                     gemm.json
  sanitizer     compute-sanitizer memcheck/racecheck/synccheck on small     sanitizer/*.log
                programs, when the tool is on PATH

summary.md is rewritten after every stage. The budgets add up to at most
TOTAL_BUDGET_S (asserted by --dry-run); a kernel that hangs the device is
not interruptible from Python, which is why every stage checks its deadline
between programs and writes each row as soon as it has it.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_bench beside this file

import gpu_bench  # noqa: E402

from fusecc.compiler import parse_module, verify  # noqa: E402
from fusecc.compiler.diagnostics import DiagnosticEngine  # noqa: E402
from fusecc.compiler.pass_manager import PassContext  # noqa: E402
from fusecc.driver.cuda_level import build_manifest, compile_checked  # noqa: E402
from fusecc.driver.cuda_target import ARCH_HARDWARE, lower_to_cuda  # noqa: E402
from fusecc.driver.inputs import random_input_with_shrunk_weights  # noqa: E402
from fusecc.passes.backends.hardware import HARDWARE  # noqa: E402
from fusecc.runtime.cuda.driver_check import DEFAULT_SHARED_LIMIT, driver_mismatch, split_driver_version, wheel_cuda_majors  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TOTAL_BUDGET_S = 480.0
STAGE_BUDGETS_S = {
    "environment": 10.0,
    "build": 90.0,
    "correctness": 130.0,
    "kernel_times": 60.0,
    "fused_vs_cupy": 90.0,
    "gemm": 40.0,
    "sanitizer": 55.0,
}
GPU_STAGES = ("correctness", "kernel_times", "fused_vs_cupy", "gemm", "sanitizer")
# Per result dtype, the normwise error allowed against the reference (max |d| / max |expected|).
TOLERANCE = {"f32": 1e-4, "f64": 1e-9, "f16": 1e-2, "bf16": 2e-2}
GEMM_SIZES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (4096, 1024, 4096))
# Tensor-core GEMMs (docs/cuda-tensor-cores.md): the first run of mma.sync on a
# device. (M, N, K, kind); tf32 is an f32 program compiled with allow_tf32.
# Checked against an f32 product of the same inputs on the host, within
# TENSOR_CORE_TOLERANCE; f16 timed against cuBLAS on the same f16 arrays.
TENSOR_CORE_GEMMS = ((2048, 2048, 2048, "f16"), (2048, 2048, 2048, "bf16"), (2048, 2048, 2048, "tf32"))
TENSOR_CORE_TOLERANCE = {"f16": 2e-3, "bf16": 1.6e-2, "tf32": 2e-3}
TIMING_REPEATS = 20


class OverBudget(Exception):
    """A stage ran past its deadline."""


@dataclass
class Built:
    name: str
    text: str  # the tensor program
    source: str  # kernels.cu
    manifest: object
    kernels: list  # emit.KernelInfo
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray] | None = None


@dataclass
class Check:
    out: Path
    arch: str
    random: int
    dry_run: bool
    started: float = field(default_factory=time.perf_counter)
    summary: dict[str, str] = field(default_factory=dict)
    built: list[Built] = field(default_factory=list)
    runtime: object = None

    def write(self, name: str, data) -> None:
        (self.out / name).write_text(json.dumps(data, indent=1, default=str) + "\n")

    def append(self, name: str, row: dict) -> None:
        with open(self.out / name, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")

    def write_summary(self) -> None:
        lines = [f"# gpu_check ({'dry run' if self.dry_run else 'on the GPU'}, {self.arch}), {time.perf_counter() - self.started:.0f} s", ""]
        lines += [f"- **{stage}**: {text}" for stage, text in self.summary.items()]
        (self.out / "summary.md").write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- stages that need no GPU


def environment(check: Check, deadline: float) -> str:
    from fusecc.runtime.cuda.runtime import gpu_unavailable_reason

    env: dict = {"python": sys.version.split()[0], "platform": platform.platform(), "numpy": np.__version__}
    env["wheel_cuda_majors"] = wheel_cuda_majors()
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        lib.cuDriverGetVersion(ctypes.byref(version))
        env["driver_cuda"] = "%d.%d" % split_driver_version(version.value)
        env["driver_check"] = driver_mismatch(split_driver_version(version.value), env["wheel_cuda_majors"]) or "ok"
    except OSError:
        env["driver_cuda"] = None
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit", "--format=csv,noheader"]
        env["nvidia_smi"] = subprocess.run(query, capture_output=True, text=True, timeout=10).stdout.strip()
    env["gpu_unavailable_reason"] = gpu_unavailable_reason()
    env["compute_sanitizer"] = shutil.which("compute-sanitizer")
    if not check.dry_run and env["gpu_unavailable_reason"] is None:
        import cupy

        from fusecc.runtime.cuda.runtime import CudaRuntime

        check.runtime = CudaRuntime()
        props = cupy.cuda.runtime.getDeviceProperties(check.runtime.device.id)
        env.update(
            gpu=props["name"].decode(),
            arch=check.runtime.arch,
            sms=props["multiProcessorCount"],
            shared_per_block_optin=props.get("sharedMemPerBlockOptin"),
            cupy=cupy.__version__,
            cuda_runtime=cupy.cuda.runtime.runtimeGetVersion(),
        )
        check.arch = check.runtime.arch
    check.write("environment.json", env)
    gpu = env.get("gpu") or f"no GPU ({env['gpu_unavailable_reason']})"
    return f"{gpu}; driver CUDA {env.get('driver_cuda')}; wheels {env['wheel_cuda_majors']}; driver check: {env.get('driver_check', 'n/a')}"


def program_texts(random: int) -> list[tuple[str, str]]:
    """(name, tensor program) of every example and `random` fuzzer programs."""
    from fusecc.tools.fuzz.generate import generate
    from fusecc.tools.fuzz.program import print_program

    texts = [(path.name, path.read_text()) for path in sorted(EXAMPLES.glob("*.ir"))]
    texts += [(f"fuzz-{seed}", print_program(generate(seed).program)) for seed in range(random)]
    return texts


def build_one(name: str, text: str, arch: str, seed: int = 0, allow_tf32: bool = False) -> Built:
    module = parse_module(text, name)
    verify(module)
    func = module.lookup("main") or module.functions()[0]
    rng = np.random.default_rng(seed)
    inputs = {arg.name_hint or f"arg{i}": random_input_with_shrunk_weights(t, rng) for i, (arg, t) in enumerate(zip(func.arguments, func.function_type.inputs))}
    context = PassContext(diagnostics=DiagnosticEngine(), target=ARCH_HARDWARE.get(arch, "h200"), allow_tf32=allow_tf32)
    cuda = lower_to_cuda(module, arch, context, filename=name)
    manifest = build_manifest(module, cuda, "kernels.cu", arch, func.sym_name)
    compile_checked(cuda, manifest.source, arch)
    inputs = dict(zip((s.name for s in manifest.inputs), inputs.values(), strict=True))
    return Built(name, text, cuda.text, manifest, cuda.kernels, inputs)


def build(check: Check, deadline: float) -> str:
    """Every program to CUDA C and its manifest, checked by NVRTC; the
    launch plan validated against the device (threads, shared memory)."""
    hardware = HARDWARE[ARCH_HARDWARE.get(check.arch, "h200")]
    rows, problems = [], []
    for name, text in program_texts(check.random):
        if time.perf_counter() > deadline:
            problems.append(f"{name}: not built, over the stage budget")
            continue
        start = time.perf_counter()
        try:
            built = build_one(name, text, check.arch)
        except Exception as exc:  # noqa: BLE001 - a program that does not build is a result
            problems.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            rows.append({"program": name, "error": problems[-1]})
            continue
        check.built.append(built)
        info = {k.name: k for k in built.kernels}
        launches = []
        for launch in built.manifest.launches:
            kernel = info.get(launch.kernel)
            static = kernel.static_shared_bytes if kernel else 0
            threads = math.prod(launch.block)
            launches.append({"kernel": launch.kernel, "grid": list(launch.grid), "block": list(launch.block), "static_shared": static, "dynamic_shared": launch.shared_bytes, "opt_in": static + launch.shared_bytes > DEFAULT_SHARED_LIMIT})
            if threads > 1024:
                problems.append(f"{name}: {launch.kernel} launches {threads} threads per block")
            if static + launch.shared_bytes > hardware.shared_memory_per_block:
                problems.append(f"{name}: {launch.kernel} needs {static + launch.shared_bytes} B of shared memory, the device has {hardware.shared_memory_per_block}")
            if launch.kernel not in built.source:
                problems.append(f"{name}: launches {launch.kernel}, which kernels.cu does not define")
        rows.append({"program": name, "seconds": round(time.perf_counter() - start, 3), "kernels": len(built.kernels), "launches": launches, "source_lines": built.source.count("\n")})
        check.write("build.json", {"arch": check.arch, "programs": rows, "problems": problems})
    check.write("build.json", {"arch": check.arch, "programs": rows, "problems": problems})
    opt_ins = sum(launch["opt_in"] for row in rows for launch in row.get("launches", []))
    text = f"{len(check.built)} programs built, {sum(len(b.manifest.launches) for b in check.built)} launches ({opt_ins} need the shared-memory opt-in)"
    if problems:
        raise StageFailed(text + "; problems: " + "; ".join(problems[:5]))
    return text


class StageFailed(Exception):
    """A stage finished with findings: its summary line says which."""


def validate_plan(check: Check) -> str:
    total = sum(STAGE_BUDGETS_S.values())
    if total > TOTAL_BUDGET_S:
        raise StageFailed(f"the stage budgets add up to {total} s, over {TOTAL_BUDGET_S} s")
    missing = [name for name in STAGE_BUDGETS_S if name not in STAGES]
    if missing:
        raise StageFailed(f"no function for stages {missing}")
    if not check.built:
        raise StageFailed("nothing was built")
    for pattern in gpu_bench.PATTERNS:
        gpu_bench.compile_pattern(pattern, "tiny", check.arch, np.random.default_rng(0))
    gemm_program(64, 64, 64, "f32")  # parses, so the GEMM stage's programs do
    for m, n, k, kind in TENSOR_CORE_GEMMS:  # the tensor-core GEMMs build (NVRTC), on mma.sync
        built = build_one(f"gemm_{kind}.ir", gemm_program(m, n, k, "f32" if kind == "tf32" else kind), check.arch, allow_tf32=kind == "tf32")
        if f"fusecc_mma_{kind}(" not in built.source:
            raise StageFailed(f"the {kind} GEMM does not run on tensor cores")
    plan = {"stages": STAGE_BUDGETS_S, "total_budget_s": total, "programs": [b.name for b in check.built], "gpu_bench_patterns": [p.name for p in gpu_bench.PATTERNS], "gemm_sizes": GEMM_SIZES, "tensor_core_gemms": TENSOR_CORE_GEMMS}
    check.write("plan.json", plan)
    return f"{len(STAGE_BUDGETS_S)} stages in {total:.0f} s of {TOTAL_BUDGET_S:.0f}; {len(check.built)} programs, {len(gpu_bench.PATTERNS)} gpu_bench patterns, {len(GEMM_SIZES)} GEMMs"


# --------------------------------------------------------------------------- stages on the GPU


def reference_outputs(built: Built, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from fusecc.runtime.reference import evaluate

    module = parse_module(built.text, built.name)
    verify(module)
    values = evaluate(module, built.manifest.entry, [inputs[s.name] for s in built.manifest.inputs])
    return {spec.name: value for spec, value in zip(built.manifest.outputs, values, strict=True)}


def normwise_error(got, expected) -> float:
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if expected.size == 0:
        return 0.0
    finite = np.isfinite(expected)
    if not np.array_equal(finite, np.isfinite(got)) or not np.array_equal(np.isnan(expected), np.isnan(got)):
        return math.inf
    if not finite.any():
        return 0.0
    return float(np.max(np.abs(got[finite] - expected[finite])) / max(float(np.max(np.abs(expected[finite]))), 1e-30))


def compare(built: Built, got: dict, expected: dict) -> tuple[bool, float]:
    worst, ok = 0.0, True
    for spec in built.manifest.outputs:
        error = normwise_error(got[spec.name], expected[spec.name])
        worst = max(worst, error)
        ok &= error <= TOLERANCE.get(spec.dtype, 0.0)
    return ok, worst


def correctness(check: Check, deadline: float) -> str:
    passed = failed = 0
    for built in check.built:
        if time.perf_counter() > deadline:
            check.append("correctness.jsonl", {"program": built.name, "skipped": "over the stage budget"})
            continue
        row: dict = {"program": built.name}
        try:
            program = check.runtime.prepare(built.manifest, built.source)
            eager_ok, row["eager_error"] = compare(built, program(built.inputs), reference_outputs(built, built.inputs))
            other = {name: np.asarray(value)[::-1].copy() if np.asarray(value).ndim else value for name, value in built.inputs.items()}
            program.capture_graph()
            graph_ok, row["graph_error"] = compare(built, program(other), reference_outputs(built, other))
            row["ok"] = eager_ok and graph_ok
        except Exception as exc:  # noqa: BLE001
            row["ok"], row["error"] = False, f"{type(exc).__name__}: {exc}"[:500]
        passed += row["ok"]
        failed += not row["ok"]
        check.append("correctness.jsonl", row)
    text = f"{passed} programs match the reference eagerly and as graphs, {failed} do not"
    if failed:
        raise StageFailed(text)
    return text


def launch_bytes(manifest, launch) -> int:
    """The bytes a launch's arguments span: each read or written once at least."""
    from fusecc.passes.backends.cuda.manifest import ArenaArg, TensorArg

    specs = {s.name: s for s in (*manifest.inputs, *manifest.outputs)}
    total = 0
    for arg in launch.args:
        if isinstance(arg, TensorArg):
            total += specs[arg.name].nbytes
        elif isinstance(arg, ArenaArg):
            total += math.prod(arg.shape) * {"f64": 8, "i64": 8, "f32": 4, "i32": 4, "f16": 2, "bf16": 2}.get(arg.dtype, 1)
    return total


def kernel_times(check: Check, deadline: float) -> str:
    cupy = check.runtime.cp
    peak = HARDWARE[ARCH_HARDWARE.get(check.arch, "h200")].memory_bandwidth
    rows = 0
    with open(check.out / "kernels.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["program", "launch", "kernel", "grid", "block", "shared_bytes", "median_us", "min_us", "bytes", "gb_per_s", "of_peak"])
        for built in (b for b in check.built if not b.name.startswith("fuzz-")):
            if time.perf_counter() > deadline:
                writer.writerow([built.name, "skipped: over the stage budget"])
                continue
            program = check.runtime.prepare(built.manifest, built.source)
            program(built.inputs)
            stream = check.runtime.stream
            with check.runtime.device, stream:
                marks = []
                for _ in range(TIMING_REPEATS):
                    for i, (launch, args) in enumerate(zip(built.manifest.launches, program.args)):
                        start, end = cupy.cuda.Event(), cupy.cuda.Event()
                        start.record(stream)
                        program.kernels[launch.kernel](launch.grid, launch.block, args, shared_mem=launch.shared_bytes)
                        end.record(stream)
                        marks.append((i, start, end))
                stream.synchronize()
            times: dict[int, list[float]] = {}
            for i, start, end in marks:
                times.setdefault(i, []).append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
            for i, launch in enumerate(built.manifest.launches):
                median, nbytes = float(np.median(times[i])), launch_bytes(built.manifest, launch)
                gbps = nbytes / median / 1e9
                writer.writerow([built.name, i, launch.kernel, launch.grid, launch.block, launch.shared_bytes, f"{median * 1e6:.2f}", f"{min(times[i]) * 1e6:.2f}", nbytes, f"{gbps:.1f}", f"{gbps * 1e9 / peak:.2f}"])
                rows += 1
            f.flush()
    return f"{rows} launches timed ({TIMING_REPEATS} CUDA-event samples each)"


def fused_vs_cupy(check: Check, deadline: float) -> str:
    cupy, runtime = check.runtime.cp, check.runtime
    rng, rows = np.random.default_rng(0), []
    for pattern in gpu_bench.PATTERNS:
        if time.perf_counter() > deadline:
            rows.append({"pattern": pattern.name, "skipped": "over the stage budget"})
            continue
        compiled = gpu_bench.compile_pattern(pattern, "full", runtime.arch, rng)
        program = runtime.prepare(compiled.manifest, compiled.source)
        program(compiled.inputs)
        device_inputs = {name: program.bound.tensors[name] for name in compiled.inputs}
        program.capture_graph()
        with runtime.device:
            graph, _ = gpu_bench.capture(runtime.stream, lambda: pattern.baseline(cupy, device_inputs, compiled.sizes))
            times = gpu_bench.interleaved_gpu_times(cupy, runtime.stream, {"fused": program.launch, "cupy": lambda: graph.launch(runtime.stream)}, gpu_bench.ROUNDS)
        fused, baseline = float(np.median(times["fused"])), float(np.median(times["cupy"]))
        rows.append({"pattern": pattern.name, "fused_ms": fused * 1e3, "cupy_ms": baseline * 1e3, "speedup": baseline / fused, "fused_gb_per_s": compiled.bytes_moved / fused / 1e9, "kernels": len(compiled.manifest.launches)})
        check.write("fused_vs_cupy.json", rows)
    check.write("fused_vs_cupy.json", rows)
    return ", ".join(f"{r['pattern']} {r['speedup']:.2f}x" for r in rows if "speedup" in r) or "nothing timed"


def gemm_program(m: int, n: int, k: int, dtype: str) -> str:
    return (
        f"func.func @main(%a: tensor<{m}x{k}x{dtype}>, %b: tensor<{k}x{n}x{dtype}>) -> tensor<{m}x{n}x{dtype}> {{\n"
        f"  %c = tensor.matmul %a, %b : (tensor<{m}x{k}x{dtype}>, tensor<{k}x{n}x{dtype}>) -> tensor<{m}x{n}x{dtype}>\n"
        f"  func.return %c : tensor<{m}x{n}x{dtype}>\n}}\n"
    )


def gemm(check: Check, deadline: float) -> str:
    cupy, runtime = check.runtime.cp, check.runtime
    rows = []
    failed = tensor_core_gemms(check, deadline, rows)  # first: the first mma.sync on a device matters more than f32 timings
    for m, n, k in GEMM_SIZES:
        if time.perf_counter() > deadline:
            rows.append({"shape": [m, n, k], "skipped": "over the stage budget"})
            continue
        built = build_one(f"gemm_{m}x{n}x{k}.ir", gemm_program(m, n, k, "f32"), runtime.arch)
        program = runtime.prepare(built.manifest, built.source)
        got = program(built.inputs)
        a, b = (program.bound.tensors[s.name] for s in built.manifest.inputs)
        expected = cupy.matmul(a, b)
        error = normwise_error(got[built.manifest.outputs[0].name], cupy.asnumpy(expected))
        program.capture_graph()
        with runtime.device:
            graph, _ = gpu_bench.capture(runtime.stream, lambda: cupy.matmul(a, b))
            times = gpu_bench.interleaved_gpu_times(cupy, runtime.stream, {"fusecc": program.launch, "cublas": lambda: graph.launch(runtime.stream)}, 20)
        flops = 2.0 * m * n * k
        ours, cublas = float(np.median(times["fusecc"])), float(np.median(times["cublas"]))
        rows.append({"shape": [m, n, k], "dtype": "f32", "error_vs_cublas": error, "fusecc_tflops": flops / ours / 1e12, "cublas_tflops": flops / cublas / 1e12, "fusecc_ms": ours * 1e3, "cublas_ms": cublas * 1e3})
        check.write("gemm.json", rows)
    check.write("gemm.json", rows)
    text = ", ".join(f"{r['shape']} {r['dtype']}: {r['fusecc_tflops']:.1f} vs cuBLAS {r['cublas_tflops']:.1f} TFLOP/s" for r in rows if "cublas_tflops" in r)
    text += "; " + ", ".join(f"{r['dtype']} {r['shape']}: {r['fusecc_tflops']:.1f} TFLOP/s, error {r['error_vs_f32']:.1e}" for r in rows if "error_vs_f32" in r)
    if failed:
        raise StageFailed(text + "; over the tolerance: " + ", ".join(failed))
    return text


def tensor_core_gemms(check: Check, deadline: float, rows: list) -> list[str]:
    """TENSOR_CORE_GEMMS: error against the host's f32 product of the same
    inputs, TFLOP/s (f16 also cuBLAS's on the same arrays). Returns the
    kinds over TENSOR_CORE_TOLERANCE."""
    cupy, runtime = check.runtime.cp, check.runtime
    failed = []
    for m, n, k, kind in TENSOR_CORE_GEMMS:
        if time.perf_counter() > deadline:
            rows.append({"shape": [m, n, k], "dtype": kind, "skipped": "over the stage budget"})
            continue
        built = build_one(f"gemm_{kind}_{m}x{n}x{k}.ir", gemm_program(m, n, k, "f32" if kind == "tf32" else kind), runtime.arch, allow_tf32=kind == "tf32")
        program = runtime.prepare(built.manifest, built.source)
        got = program(built.inputs)[built.manifest.outputs[0].name]
        a, b = (np.asarray(built.inputs[s.name], dtype=np.float32) for s in built.manifest.inputs)
        error = normwise_error(got, a @ b)
        program.capture_graph()
        flops = 2.0 * m * n * k
        row = {"shape": [m, n, k], "dtype": kind, "error_vs_f32": error, "tolerance": TENSOR_CORE_TOLERANCE[kind]}
        with runtime.device:
            timed = {"fusecc": program.launch}
            if kind == "f16":
                da, db = (program.bound.tensors[s.name] for s in built.manifest.inputs)
                graph, _ = gpu_bench.capture(runtime.stream, lambda: cupy.matmul(da, db))
                timed["cublas"] = lambda: graph.launch(runtime.stream)
            times = gpu_bench.interleaved_gpu_times(cupy, runtime.stream, timed, TIMING_REPEATS)
        row["fusecc_tflops"] = flops / float(np.median(times["fusecc"])) / 1e12
        if "cublas" in times:
            row["cublas_tflops"] = flops / float(np.median(times["cublas"])) / 1e12
        rows.append(row)
        check.write("gemm.json", rows)
        if not error <= TENSOR_CORE_TOLERANCE[kind]:
            failed.append(f"{kind} {m}x{n}x{k}: {error:.1e}")
    return failed


def sanitizer(check: Check, deadline: float) -> str:
    tool = shutil.which("compute-sanitizer")
    if tool is None:
        return "compute-sanitizer is not on PATH: skipped"
    folder = check.out / "sanitizer"
    folder.mkdir(exist_ok=True)
    results = []
    for name in ("layernorm4.ir", "attention.ir", "mlp.ir"):
        for mode in ("memcheck", "racecheck", "synccheck", "initcheck"):
            left = deadline - time.perf_counter()
            if left < 5:
                results.append(f"{name}/{mode}: over budget")
                continue
            command = [tool, "--tool", mode, "--error-exitcode", "3", sys.executable, "-m", "fusecc.tools.fusecc", "run", str(EXAMPLES / name), "--target", "cuda", "--random-inputs", "-q"]
            try:
                proc = subprocess.run(command, capture_output=True, text=True, timeout=left)
                (folder / f"{name}.{mode}.log").write_text(proc.stdout + proc.stderr)
                results.append(f"{name}/{mode}: {'clean' if proc.returncode == 0 else f'exit {proc.returncode}'}")
            except subprocess.TimeoutExpired:
                results.append(f"{name}/{mode}: timed out")
    return "; ".join(results)


STAGES: dict[str, Callable[[Check, float], str]] = {
    "environment": environment,
    "build": build,
    "correctness": correctness,
    "kernel_times": kernel_times,
    "fused_vs_cupy": fused_vs_cupy,
    "gemm": gemm,
    "sanitizer": sanitizer,
}


def _alarm(signum, frame):
    raise OverBudget("the stage ran past its budget")


def run_stage(check: Check, name: str) -> bool:
    """Run one stage under its budget; its summary line says how it went."""
    budget = STAGE_BUDGETS_S[name]
    deadline = time.perf_counter() + budget
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(budget) + 5)  # a last resort: the stages check `deadline` themselves
    try:
        check.summary[name] = STAGES[name](check, deadline)
        ok = True
    except StageFailed as exc:
        check.summary[name], ok = f"FAILED: {exc}", False
    except Exception as exc:  # noqa: BLE001 - the next stage still runs
        check.summary[name], ok = f"ERROR: {type(exc).__name__}: {exc}", False
        (check.out / f"{name}.traceback.txt").write_text(traceback.format_exc())
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    check.write_summary()
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="results folder (default gpu_check_results/<UTC time>)")
    parser.add_argument("--random", type=int, default=50, help="random programs from the fuzzer (default 50)")
    parser.add_argument("--arch", default="sm_90", choices=("sm_90", "sm_80"), help="the arch of --dry-run (a GPU run uses the device's)")
    parser.add_argument("--dry-run", action="store_true", help="build everything and validate the plan; nothing runs on a device")
    args = parser.parse_args(argv)
    out = Path(args.out or Path("gpu_check_results") / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    out.mkdir(parents=True, exist_ok=True)
    check = Check(out, args.arch, args.random, args.dry_run)
    ok = run_stage(check, "environment") & run_stage(check, "build")
    if args.dry_run:
        try:
            check.summary["plan"] = validate_plan(check)
        except StageFailed as exc:
            check.summary["plan"], ok = f"FAILED: {exc}", False
        check.write_summary()
    elif check.runtime is None:
        for name in GPU_STAGES:
            check.summary[name] = "skipped: no usable GPU (see environment)"
        check.write_summary()
        ok = False
    else:
        for name in GPU_STAGES:
            ok &= run_stage(check, name)
    print((out / "summary.md").read_text(), end="")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
