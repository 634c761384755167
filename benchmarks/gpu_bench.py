"""Programs fusecc generates against CuPy op by op, on the GPU.

    python benchmarks/gpu_bench.py                   # needs a GPU; under 5 minutes
    python benchmarks/gpu_bench.py --dry-run         # no GPU needed
    python benchmarks/gpu_bench.py --dry-run --tiny  # the same on tiny shapes (the test runs this)

Each pattern is a tensor program that fusecc compiles the way `fusecc
model.ir -o kernels.cu` does (fused, tiled for the device, CUDA C and its
kernels.json): LayerNorm+GELU and softmax over [4096, 1024], bias + GELU +
residual over [4096, 1024], attention (batch 1, 12 heads, 128 tokens, head
64), examples/mlp.ir and examples/encoder_block.ir. On the GPU both
contenders are captured as CUDA graphs and replayed: the fused program
through the GPU runtime, and the same computation as CuPy operations one by
one (the unfused baseline, written against the array API numpy and CuPy
share; a graph takes its launch overhead away, as it does the fused one's).
Their replays are interleaved (one of each per round, the first rotating)
and timed with CUDA events on one stream. The table gives median GPU times
with their [min-max], the ratio of the medians, the fused program's effective bandwidth (inputs
read once, outputs written once) against the device's peak
(passes/backends/hardware.py) and its kernel count. Then flash attention's memory
for S = 512 ... 4096: the arena and the one allocation grow linearly in S,
where materialised scores would grow as S².

Without a GPU it says so and exits 0. `--dry-run` does everything a GPU is
not needed for: it compiles every pattern for --arch (NVRTC to a cubin:
kernel count, registers, spills), runs a small case of each on the CPU
harness against its numpy baseline, and prints the memory table.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from fusecc.compiler import parse_module, verify
from fusecc.passes.backends.hardware import HARDWARE
from fusecc.driver.cuda_level import build_manifest
from fusecc.driver.cuda_target import lower_to_cuda
from fusecc.runtime.cuda.execute import plan_memory, run_on_cpu
from fusecc.driver.inputs import random_input_with_shrunk_weights

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TIME_BUDGET_S = 240.0
GELU_TANH = math.sqrt(2 / math.pi)


# --------------------------------------------------------------------------- the baselines, numpy or CuPy


def erf(xp):
    if xp is np:
        try:
            from scipy.special import erf as scipy_erf

            return scipy_erf
        except ImportError:
            return np.vectorize(math.erf, otypes=[np.float32])
    from cupyx.scipy.special import erf as cupy_erf

    return cupy_erf


def gelu(xp, x, approximate: bool):
    if approximate:
        return 0.5 * x * (1 + xp.tanh(GELU_TANH * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1 + erf(xp)(x / math.sqrt(2)))


def softmax(xp, x):
    e = xp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layernorm(xp, x, gamma, beta, eps):
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    return centered / xp.sqrt((centered * centered).mean(axis=-1, keepdims=True) + eps) * gamma + beta


def heads(x, n):
    b, s, h = x.shape
    return x.reshape(b, s, n, h // n).transpose(0, 2, 1, 3)


def encoder_block(xp, a, n_heads: int):
    q, k, v = (heads(a["x"] @ a[f"w{p}"] + a[f"b{p}"], n_heads) for p in "qkv")
    scale = 1 / math.sqrt(q.shape[-1])
    context = softmax(xp, q @ xp.swapaxes(k, -1, -2) * scale + a["mask"]) @ v
    merged = context.transpose(0, 2, 1, 3).reshape(a["x"].shape)
    h = layernorm(xp, a["x"] + merged @ a["wo"] + a["bo"], a["ln1_gamma"], a["ln1_beta"], 1e-12)
    return layernorm(xp, h + gelu(xp, h @ a["w1"] + a["b1"], False) @ a["w2"] + a["b2"], a["ln2_gamma"], a["ln2_beta"], 1e-12)


# --------------------------------------------------------------------------- the patterns


def resized(example: str, dims: dict[int, int], scale: tuple[str, str] | None = None) -> str:
    """An example with the sizes in its tensor types renamed by `dims`
    (and its attention scale constant replaced): the same program, smaller."""
    text = (EXAMPLES / example).read_text()
    text = re.sub(r"tensor<([0-9x]+)x(\w+)>", lambda m: "tensor<" + "x".join(str(dims.get(int(d), int(d))) for d in m.group(1).split("x")) + f"x{m.group(2)}>", text)
    return text.replace(*scale) if scale else text


def elementwise_program(body: str, args: str, shape: str) -> str:
    return f"func.func @main({args}) -> tensor<{shape}xf32> {{\n{body}\n}}\n"


@dataclass(frozen=True)
class Pattern:
    name: str
    program: Callable[[dict], str]  # sizes -> the tensor program
    baseline: Callable  # (xp, inputs by name, sizes) -> outputs
    sizes: dict[str, dict]  # "full", "small", "tiny" -> sizes


def layernorm_gelu(s):
    t = f"tensor<{s['rows']}x{s['cols']}xf32>"
    v = f"tensor<{s['cols']}xf32>"
    return elementwise_program(
        f"  %n = tensor.layernorm %x, %gamma, %beta {{epsilon = 1.0e-05}} : ({t}, {v}, {v}) -> {t}\n"
        f"  %y = tensor.gelu %n {{approximate = \"tanh\"}} : ({t}) -> {t}\n  func.return %y : {t}",
        f"%x: {t}, %gamma: {v}, %beta: {v}", f"{s['rows']}x{s['cols']}")


def softmax_program(s):
    t = f"tensor<{s['rows']}x{s['cols']}xf32>"
    return elementwise_program(f"  %y = tensor.softmax %x : ({t}) -> {t}\n  func.return %y : {t}", f"%x: {t}", f"{s['rows']}x{s['cols']}")


def bias_gelu_residual(s):
    t = f"tensor<{s['rows']}x{s['cols']}xf32>"
    v = f"tensor<{s['cols']}xf32>"
    return elementwise_program(
        f"  %a = tensor.add %x, %bias : ({t}, {v}) -> {t}\n"
        f"  %g = tensor.gelu %a {{approximate = \"tanh\"}} : ({t}) -> {t}\n"
        f"  %y = tensor.add %g, %residual : ({t}, {t}) -> {t}\n  func.return %y : {t}",
        f"%x: {t}, %bias: {v}, %residual: {t}", f"{s['rows']}x{s['cols']}")


def attention_program(s):
    t = f"tensor<1x{s['heads']}x{s['seq']}x{s['dim']}xf32>"
    return f"func.func @main(%q: {t}, %k: {t}, %v: {t}) -> {t} {{\n  %o = tensor.attention %q, %k, %v : ({t}, {t}, {t}) -> {t}\n  func.return %o : {t}\n}}\n"


def attention_baseline(xp, a, s):
    return [softmax(xp, a["q"] @ xp.swapaxes(a["k"], -1, -2) / math.sqrt(s["dim"])) @ a["v"]]


def mlp_program(s):
    return resized("mlp.ir", {128: s["tokens"], 768: s["hidden"], 3072: s["ffn"]})


def encoder_program(s):
    dims = {128: s["tokens"], 768: s["hidden"], 3072: s["ffn"], 12: s["heads"], 64: s["hidden"] // s["heads"]}
    return resized("encoder_block.ir", dims, ("dense<0.125>", f"dense<{1 / math.sqrt(s['hidden'] // s['heads'])!r}>"))


ROWS = {"full": {"rows": 4096, "cols": 1024}, "small": {"rows": 64, "cols": 1024}, "tiny": {"rows": 8, "cols": 96}}
PATTERNS = [
    Pattern("layernorm+gelu", layernorm_gelu, lambda xp, a, s: [gelu(xp, layernorm(xp, a["x"], a["gamma"], a["beta"], 1e-5), True)], ROWS),
    Pattern("softmax", softmax_program, lambda xp, a, s: [softmax(xp, a["x"])], ROWS),
    Pattern("bias+gelu+residual", bias_gelu_residual, lambda xp, a, s: [gelu(xp, a["x"] + a["bias"], True) + a["residual"]], ROWS),
    Pattern(
        "attention",
        attention_program,
        attention_baseline,
        {"full": {"heads": 12, "seq": 128, "dim": 64}, "small": {"heads": 2, "seq": 128, "dim": 64}, "tiny": {"heads": 2, "seq": 24, "dim": 16}},
    ),
    Pattern(
        "mlp",
        mlp_program,
        lambda xp, a, s: [gelu(xp, a["x"] @ a["w1"] + a["b1"], True) @ a["w2"] + a["b2"]],
        {"full": {"tokens": 128, "hidden": 768, "ffn": 3072}, "small": {"tokens": 32, "hidden": 128, "ffn": 512}, "tiny": {"tokens": 8, "hidden": 32, "ffn": 64}},
    ),
    Pattern(
        "encoder block",
        encoder_program,
        lambda xp, a, s: [encoder_block(xp, a, s["heads"])],
        {
            "full": {"tokens": 128, "hidden": 768, "ffn": 3072, "heads": 12},
            "small": {"tokens": 32, "hidden": 128, "ffn": 512, "heads": 4},
            "tiny": {"tokens": 8, "hidden": 32, "ffn": 64, "heads": 2},
        },
    ),
]
ATTENTION_LENGTHS = {"full": (512, 1024, 2048, 4096), "tiny": (32, 64, 128, 256)}


# --------------------------------------------------------------------------- compiling and checking


@dataclass
class Compiled:
    name: str
    source: str
    manifest: object
    inputs: dict[str, np.ndarray]
    sizes: dict

    @property
    def bytes_moved(self) -> int:
        """The least DRAM traffic: every input read once, every output written once."""
        return sum(s.nbytes for s in (*self.manifest.inputs, *self.manifest.outputs))


def compile_pattern(pattern: Pattern, size: str, arch: str, rng) -> Compiled:
    sizes = pattern.sizes[size]
    module = parse_module(pattern.program(sizes), f"{pattern.name}.ir")
    verify(module)
    func = module.lookup("main") or module.functions()[0]
    inputs = {arg.name_hint: random_input_with_shrunk_weights(t, rng) for arg, t in zip(func.arguments, func.function_type.inputs)}
    cuda = lower_to_cuda(module, arch, filename=f"{pattern.name}.ir")
    manifest = build_manifest(module, cuda, "kernels.cu", arch, func.sym_name)
    return Compiled(pattern.name, cuda.text, manifest, inputs, sizes)


def max_error(got, expected) -> float:
    """The largest difference, relative to the largest expected magnitude."""
    expected = np.asarray(expected, dtype=np.float64)
    return float(np.max(np.abs(np.asarray(got, dtype=np.float64) - expected)) / max(float(np.max(np.abs(expected))), 1e-30))


TOLERANCE = 1e-4  # normwise; measured below 2e-6 on the CPU harness (tests/passes/test_emit_cuda_programs.py)


def attention_programs(arch: str, lengths):
    """(S, manifest, source) of attention over 12 heads of 64 for each sequence length S."""
    for s in lengths:
        module = parse_module(attention_program({"heads": 12, "seq": s, "dim": 64}), "attention.ir")
        verify(module)
        cuda = lower_to_cuda(module, arch, filename="attention.ir")
        yield s, build_manifest(module, cuda, "kernels.cu", arch), cuda.text


def memory_row(s: int, manifest) -> tuple[int, int, int, int]:
    """(S, arena bytes, the one allocation, bytes S×S scores would take)."""
    return s, manifest.arena_bytes, plan_memory(manifest).total_bytes, 12 * s * s * 4


def print_attention_memory(rows, device_bytes=None) -> None:
    print("\nflash attention, 12 heads of 64: memory against S")
    print(f"{'S':>6} {'arena B':>10} {'allocation B':>13} {'alloc / S':>10} {'S x S scores B':>15}" + (f" {'device B':>12}" if device_bytes else ""))
    for i, (s, arena, total, scores) in enumerate(rows):
        extra = f" {device_bytes[i]:12d}" if device_bytes else ""
        print(f"{s:6d} {arena:10d} {total:13d} {total / s:10.0f} {scores:15d}{extra}")


# --------------------------------------------------------------------------- without a GPU


def dry_run(arch: str, tiny: bool) -> int:
    """Compile every pattern for `arch`, run a small case of each on the CPU
    harness against numpy, and print the attention memory table."""
    from fusecc.runtime.cuda.resources import resource_usage

    rng = np.random.default_rng(0)
    failures = 0
    print(f"dry run for {arch}: compile each pattern ({'tiny' if tiny else 'full'} sizes), run {'tiny' if tiny else 'small'} ones on the CPU harness")
    print(f"{'pattern':<20} {'kernels':>7} {'max regs':>8} {'spills':>6} {'arena B':>10}  CPU harness vs numpy")
    for pattern in PATTERNS:
        compiled = compile_pattern(pattern, "tiny" if tiny else "full", arch, rng)
        usage = resource_usage(compiled.source, f"{pattern.name}.cu", arch)
        spills = sum(u.spills for u in usage.values())
        small = compiled if tiny else compile_pattern(pattern, "small", arch, rng)
        outputs = run_on_cpu(small.manifest, small.source, small.inputs)
        expected = pattern.baseline(np, small.inputs, small.sizes)
        error = max(max_error(outputs[spec.name], want) for spec, want in zip(small.manifest.outputs, expected, strict=True))
        ok = error <= TOLERANCE and not spills
        failures += not ok
        verdict = f"{'ok' if ok else 'MISMATCH'} (max rel error {error:.1e})"
        print(f"{pattern.name:<20} {len(compiled.manifest.launches):7d} {max(u.registers for u in usage.values()):8d} {spills:6d} {compiled.manifest.arena_bytes:10d}  {verdict}")
    print_attention_memory([memory_row(s, manifest) for s, manifest, _ in attention_programs(arch, ATTENTION_LENGTHS["tiny" if tiny else "full"])])
    return 1 if failures else 0


# --------------------------------------------------------------------------- on the GPU

ROUNDS = 50  # replays of each contender
WARMUP = 5


def interleaved_rounds(names: list[str], rounds: int) -> list[list[str]]:
    """Each round runs every contender once; the first one rotates, so none
    always follows the same other."""
    return [names[r % len(names):] + names[: r % len(names)] for r in range(rounds)]


def capture(stream, work: Callable):
    """`work`'s GPU work on `stream` recorded as a CUDA graph: (graph, what
    the captured call returned). One eager call first compiles CuPy's
    kernels and fills its memory pool, so the capture allocates little; the
    capture's buffers stay the graph's while the returned arrays live."""
    with stream:
        work()
        stream.synchronize()
        stream.begin_capture()
        try:
            result = work()
        except BaseException:
            try:  # end the capture, but report the work's error, not the capture's
                stream.end_capture()
            except Exception:
                pass
            raise
        graph = stream.end_capture()
    return graph, result


def interleaved_gpu_times(cupy, stream, replays: dict[str, Callable], rounds: int, warmup: int = WARMUP) -> dict[str, list[float]]:
    """Seconds of GPU time of each replay, timed by CUDA events recorded on
    `stream` around it, the contenders interleaved round by round."""
    with stream:
        for _ in range(warmup):
            for replay in replays.values():
                replay()
        marks = []
        for order in interleaved_rounds(list(replays), rounds):
            for name in order:
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record(stream)
                replays[name]()
                end.record(stream)
                marks.append((name, start, end))
        stream.synchronize()
    times: dict[str, list[float]] = {name: [] for name in replays}
    for name, start, end in marks:
        times[name].append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return times


def device_hardware(name: str, arch: str):
    for key, hardware in HARDWARE.items():
        if hardware.is_gpu and key in name.lower().replace(" ", ""):
            return hardware
    return next((h for h in HARDWARE.values() if h.is_gpu and h.arch == arch), None)


def gpu_bench() -> int:
    import cupy

    from fusecc.runtime.cuda.runtime import CudaRuntime

    runtime = CudaRuntime()
    device_name = cupy.cuda.runtime.getDeviceProperties(runtime.device.id)["name"].decode()
    hardware = device_hardware(device_name, runtime.arch)
    peak = hardware.memory_bandwidth if hardware else None
    print(f"device: {device_name} ({runtime.arch}); peak bandwidth {peak / 1e9:.0f} GB/s" if peak else f"device: {device_name} ({runtime.arch}); peak unknown")
    print(f"both as CUDA graphs, {ROUNDS} interleaved replays each; median GPU times")
    print(f"{'pattern':<20} {'fused ms':>9} {'cupy ms':>9} {'ratio':>7} {'GB/s':>7} {'of peak':>8} {'kernels':>8}  [min-max] fused, cupy")
    started = time.perf_counter()
    rng = np.random.default_rng(0)
    for pattern in PATTERNS:
        if time.perf_counter() - started > TIME_BUDGET_S:
            print(f"{pattern.name:<20} skipped: over the time budget")
            continue
        compiled = compile_pattern(pattern, "full", runtime.arch, rng)
        program = runtime.prepare(compiled.manifest, compiled.source)
        fused_out = program(compiled.inputs)
        device_inputs = {name: program.bound.tensors[name] for name in compiled.inputs}
        expected = pattern.baseline(cupy, device_inputs, compiled.sizes)
        error = max(max_error(fused_out[spec.name], cupy.asnumpy(want)) for spec, want in zip(compiled.manifest.outputs, expected, strict=True))
        if error > TOLERANCE:
            print(f"{pattern.name:<20} MISMATCH against CuPy: max rel error {error:.2e}")
            continue
        program.capture_graph()
        with runtime.device:
            baseline_graph, captured = capture(runtime.stream, lambda: pattern.baseline(cupy, device_inputs, compiled.sizes))
            baseline_graph.launch(runtime.stream)
            runtime.stream.synchronize()
        error = max(max_error(cupy.asnumpy(got), cupy.asnumpy(want)) for got, want in zip(captured, expected, strict=True))
        if error > TOLERANCE:
            print(f"{pattern.name:<20} MISMATCH: CuPy's graph replay against its eager run: max rel error {error:.2e}")
            continue
        with runtime.device:
            times = interleaved_gpu_times(cupy, runtime.stream, {"fused": program.launch, "cupy": lambda: baseline_graph.launch(runtime.stream)}, ROUNDS)
        fused, baseline = float(np.median(times["fused"])), float(np.median(times["cupy"]))
        gbps = compiled.bytes_moved / fused / 1e9
        of_peak = f"{gbps * 1e9 / peak:7.0%}" if peak else "    n/a"
        spread = f"[{min(times['fused']) * 1e3:.3f}-{max(times['fused']) * 1e3:.3f}] [{min(times['cupy']) * 1e3:.3f}-{max(times['cupy']) * 1e3:.3f}]"
        print(f"{pattern.name:<20} {fused * 1e3:9.3f} {baseline * 1e3:9.3f} {baseline / fused:7.2f} {gbps:7.0f} {of_peak:>8} {len(compiled.manifest.launches):8d}  {spread}")
    pool = cupy.get_default_memory_pool()
    rows, device_bytes = [], []
    for s, manifest, source in attention_programs(runtime.arch, ATTENTION_LENGTHS["full"]):
        before = pool.used_bytes()
        program = runtime.prepare(manifest, source)
        device_bytes.append(pool.used_bytes() - before)
        rows.append(memory_row(s, manifest))
        del program
    print_attention_memory(rows, device_bytes)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="no GPU: compile for --arch and run small cases on the CPU harness")
    parser.add_argument("--arch", choices=("sm_90", "sm_80"), default="sm_90", help="the architecture of --dry-run (default sm_90)")
    parser.add_argument("--tiny", action="store_true", help="with --dry-run: tiny shapes only (seconds)")
    args = parser.parse_args(argv)
    if args.dry_run:
        return dry_run(args.arch, args.tiny)
    from fusecc.runtime.cuda.runtime import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is not None:
        print(f"gpu_bench: no CUDA GPU here ({reason}); nothing to measure. `--dry-run` compiles everything and runs small cases on the CPU harness.")
        return 0
    return gpu_bench()


if __name__ == "__main__":
    sys.exit(main())
