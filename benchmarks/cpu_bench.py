"""CPU benchmark: fusecc against numpy op by op and torch eager, side by side.

    python benchmarks/cpu_bench.py [--patterns softmax,mlp] [--reps 15] [--threads N]
    OPENBLAS_NUM_THREADS=1 python benchmarks/cpu_bench.py --threads 1   # one core each

Every contender of a pattern runs in this one process, interleaved (one
call of each per round, the order rotating between rounds), and the table gives median wall times, median CPU
times (all threads; less disturbed by other processes on a shared machine)
the cold compile time of fusecc's contenders (CPU seconds with an empty
kernel cache, LLVM's forked child included; the tensor program's in a fresh
process: parse, passes and LLVM) and the wall-time ratios numpy/this and
torch/this (above 1: this is faster). Contenders:

  fusecc loops   hand-written loop IR (benchmarks/cpu_kernels.py) compiled by
                 the CPU backend: what the backend can do with a good loop
                 structure
  fusecc         the tensor program through the whole pipeline (fusion,
                 lowering, CPU backend)
  numpy          op by op, each op a full pass over memory (the unfused baseline)
  torch          eager on the CPU, if torch is installed (`pip install .[bench]`)

Outputs are checked against numpy (float64) before timing. Timings are
figures, never asserted: the machines are shared and noisy. Thread pools
wait passively (OMP_WAIT_POLICY=PASSIVE, OPENBLAS_THREAD_TIMEOUT=4 unless
set): a pool spinning after its call would slow the next contender.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import sys
import tempfile

# Contenders run interleaved: a thread pool that spins after a call (torch's
# OpenMP pool; OpenBLAS's, for 2^28 cycles by default) would take the second
# core from whichever contender runs next (the encoder block: 29 ms with two
# threads after numpy's BLAS calls, 15.5 ms without).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")  # 2^4 cycles, then sleep
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cpu_kernels as K  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
F32 = np.float32
GELU_TANH = math.sqrt(2 / math.pi)


# --------------------------------------------------------------------------- numpy, op by op


def np_gelu_tanh(x):
    return F32(0.5) * x * (F32(1) + np.tanh(F32(GELU_TANH) * (x + F32(0.044715) * x * x * x)))


def np_layernorm(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(-1, keepdims=True)
    return centred / np.sqrt(var + F32(eps)) * gamma + beta


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_attention(q, k, v):
    s = q @ np.swapaxes(k, -1, -2) * F32(1 / math.sqrt(q.shape[-1]))
    return np_softmax(s) @ v


def np_mlp(x, w1, b1, w2, b2):
    return np_gelu_tanh(x @ w1 + b1) @ w2 + b2


def np_encoder(x, mask, wq, bq, wk, bk, wv, bv, wo, bo, g1, be1, w1, b1, w2, b2, g2, be2):
    heads = 12
    b_, s, d = x.shape

    def split(t):
        return t.reshape(b_, s, heads, d // heads).transpose(0, 2, 1, 3)

    q, k, v = split(x @ wq + bq), split(x @ wk + bk), split(x @ wv + bv)
    scores = q @ np.swapaxes(k, -1, -2) * F32(0.125) + mask
    context = (np_softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(b_, s, d)
    h = np_layernorm(x + (context @ wo + bo), g1, be1, 1e-12)
    ffn = np_gelu_erf(h @ w1 + b1) @ w2 + b2
    return np_layernorm(h + ffn, g2, be2, 1e-12)


def np_gelu_erf(x):
    """numpy has no erf: scipy's (a C ufunc) when installed, else the
    reference's float64 series (much slower, which would flatter fusecc)."""
    try:
        from scipy.special import erf
    except ImportError:
        from fusecc.runtime.reference import erf
    return F32(0.5) * x * (F32(1) + erf(x / F32(math.sqrt(2))).astype(F32))


# --------------------------------------------------------------------------- torch eager


def torch_contender(pattern: str, inputs, threads: int):
    try:
        import torch
        import torch.nn.functional as TF
    except ImportError:
        return None
    torch.set_num_threads(threads)
    t = [torch.from_numpy(np.ascontiguousarray(a)) for a in inputs]
    gelu = lambda x: TF.gelu(x, approximate="tanh")  # noqa: E731
    fns = {
        "layernorm_gelu": lambda: gelu(TF.layer_norm(t[0], (t[0].shape[-1],), t[1], t[2], 1e-5)),
        "softmax": lambda: torch.softmax(t[0], -1),
        "bias_gelu_residual": lambda: gelu(t[0] + t[1]) + t[2],
        "attention": lambda: TF.scaled_dot_product_attention(t[0], t[1], t[2]),
        "mlp": lambda: gelu(t[0] @ t[1] + t[2]) @ t[3] + t[4],
    }
    fn = fns.get(pattern)
    if fn is None:
        return None

    def run():
        with torch.inference_mode():
            return fn().numpy()

    return run


# --------------------------------------------------------------------------- patterns


@dataclass
class Pattern:
    name: str
    shape: str
    inputs: list
    numpy: Callable
    loop_module: Callable | None  # -> (module, inputs for it)
    tensor_program: str | None  # tensor-level IR text for the whole pipeline
    flops: float = 0.0
    bytes: float = 0.0  # the unavoidable traffic: inputs read and outputs written once
    rtol: float = 2e-3
    extra: dict = field(default_factory=dict)


def tensor_ir(signature: str, body: str, result: str) -> str:
    return f"func.func @main({signature}) -> {result} {{\n{body}\n}}\n"


def patterns(rng) -> dict[str, Pattern]:
    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape, dtype=F32) * F32(scale)).astype(F32)

    R, C = 4096, 1024
    x, g, b, res = normal(R, C), normal(C), normal(C), normal(R, C)
    rc = f"tensor<{R}x{C}xf32>"
    vc = f"tensor<{C}xf32>"
    out = {}
    out["layernorm_gelu"] = Pattern(
        "layernorm_gelu", f"[{R},{C}]", [x, g, b],
        lambda: np_gelu_tanh(np_layernorm(x, g, b)),
        lambda: (K.layernorm_gelu(R, C, partials=64), [x, g, b]),
        tensor_ir(f"%x: {rc}, %g: {vc}, %b: {vc}",
                  f"  %y = tensor.layernorm %x, %g, %b : ({rc}, {vc}, {vc}) -> {rc}\n"
                  f"  %z = tensor.gelu %y {{approximate = \"tanh\"}} : ({rc}) -> {rc}\n  func.return %z : {rc}", rc),
        bytes=2 * x.nbytes,
    )
    out["softmax"] = Pattern(
        "softmax", f"[{R},{C}]", [x], lambda: np_softmax(x),
        lambda: (K.softmax(R, C, partials=32), [x]),
        tensor_ir(f"%x: {rc}", f"  %y = tensor.softmax %x : ({rc}) -> {rc}\n  func.return %y : {rc}", rc),
        bytes=2 * x.nbytes,
    )
    out["bias_gelu_residual"] = Pattern(
        "bias_gelu_residual", f"[{R},{C}]", [x, b, res], lambda: np_gelu_tanh(x + b) + res,
        lambda: (K.bias_gelu_residual(R, C), [x, b, res]),
        tensor_ir(f"%x: {rc}, %b: {vc}, %r: {rc}",
                  f"  %s = tensor.add %x, %b : ({rc}, {vc}) -> {rc}\n"
                  f"  %g = tensor.gelu %s {{approximate = \"tanh\"}} : ({rc}) -> {rc}\n"
                  f"  %y = tensor.add %g, %r : ({rc}, {rc}) -> {rc}\n  func.return %y : {rc}", rc),
        bytes=3 * x.nbytes,
    )
    H, S, D = 12, 128, 64
    q, k, v = normal(1, H, S, D), normal(1, H, S, D), normal(1, H, S, D)
    qt = f"tensor<1x{H}x{S}x{D}xf32>"
    out["attention"] = Pattern(
        "attention", f"B1 H{H} S{S} D{D}", [q, k, v], lambda: np_attention(q, k, v),
        lambda: (K.attention(H, S, D), [q[0], k[0], v[0]]),
        tensor_ir(f"%q: {qt}, %k: {qt}, %v: {qt}", f"  %o = tensor.attention %q, %k, %v : ({qt}, {qt}, {qt}) -> {qt}\n  func.return %o : {qt}", qt),
        flops=4 * H * S * S * D, bytes=4 * q.nbytes,
    )
    M, Dm, Hd = 512, 768, 3072
    xm, w1, b1, w2, b2 = normal(M, Dm), normal(Dm, Hd, scale=0.03), normal(Hd), normal(Hd, Dm, scale=0.03), normal(Dm)
    xt, w1t, b1t, w2t, b2t, ht = (f"tensor<{s}xf32>" for s in (f"{M}x{Dm}", f"{Dm}x{Hd}", f"{Hd}", f"{Hd}x{Dm}", f"{Dm}", f"{M}x{Hd}"))
    out["mlp"] = Pattern(
        "mlp", f"{M}x{Dm}x{Hd}", [xm, w1, b1, w2, b2], lambda: np_mlp(xm, w1, b1, w2, b2),
        lambda: (K.mlp(M, Dm, Hd), [xm, w1, b1, w2, b2]),
        tensor_ir(f"%x: {xt}, %w1: {w1t}, %b1: {b1t}, %w2: {w2t}, %b2: {b2t}",
                  f"  %h = tensor.matmul %x, %w1 : ({xt}, {w1t}) -> {ht}\n"
                  f"  %hb = tensor.add %h, %b1 : ({ht}, {b1t}) -> {ht}\n"
                  f"  %a = tensor.gelu %hb {{approximate = \"tanh\"}} : ({ht}) -> {ht}\n"
                  f"  %y = tensor.matmul %a, %w2 : ({ht}, {w2t}) -> {xt}\n"
                  f"  %yb = tensor.add %y, %b2 : ({xt}, {b2t}) -> {xt}\n  func.return %yb : {xt}", xt),
        flops=4 * M * Dm * Hd,
    )
    encoder = ROOT / "examples" / "encoder_block.ir"
    if encoder.exists():
        from fusecc.compiler import parse_module

        func = parse_module(encoder.read_text()).functions()[0]
        shapes = [t.shape for t in func.function_type.inputs]
        enc = [normal(*s, scale=0.03 if len(s) == 2 else 1.0) for s in shapes]
        enc[1] = np.zeros(shapes[1], F32)  # attention mask: attend everywhere
        for i in (10, 16):  # layernorm gammas around 1
            enc[i] = (enc[i] + 1).astype(F32)
        out["encoder_block"] = Pattern(
            "encoder_block", "BERT-base layer, S128", enc, lambda: np_encoder(*enc), None, encoder.read_text(),
            flops=2 * 128 * 768 * 768 * 4 + 4 * 12 * 128 * 128 * 64 + 4 * 128 * 768 * 3072,
        )
    return out


def pipeline_contender(pattern: Pattern):
    """The tensor program through fusion, lowering and the CPU backend: (a
    function running it, its cold compile time in CPU seconds, a note)."""
    from fusecc.compiler import parse_module, verify
    from fusecc.compiler.pass_manager import PassContext, run_pipeline
    from fusecc.driver.cpu_target import loop_pipeline
    from fusecc.runtime.cpu import compile_program

    module = parse_module(pattern.tensor_program)
    verify(module)
    run_pipeline(loop_pipeline(), module, PassContext(target="cpu"))
    program = compile_program(module)
    inputs = pattern.inputs
    return (lambda: program.run(inputs)[0]), cold_compile_seconds(pattern.tensor_program), f"{len(program.kernels)} kernels"


def cold_compile_seconds(tensor_program: str) -> float:
    """Parse, passes and LLVM for `tensor_program` in a fresh process with an
    empty kernel cache (compare_revisions.py's probe): CPU seconds, LLVM's
    forked child included."""
    from compare_revisions import run_probe

    with tempfile.TemporaryDirectory(prefix="cpu-bench-") as tmp:
        path = pathlib.Path(tmp) / "program.ir"
        path.write_text(tensor_program)
        return run_probe(sys.executable, ["compile", str(path)], str(pathlib.Path(tmp) / "cache"))["total"]


def cold_loop_compile(module, **options):
    """compile_program of a loop module never compiled in this process, with
    the bench's empty disk cache: (program, CPU seconds incl. LLVM's child)."""
    from compare_revisions import cpu_seconds
    from fusecc.runtime.cpu import compile_program

    start = cpu_seconds()
    program = compile_program(module, **options)
    return program, cpu_seconds() - start


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of all this process's threads)."""
    start, start_cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - start_cpu


def bench(pattern: Pattern, reps: int, compare_vectorizers: bool = False) -> list[tuple[str, float, float, float, str]]:
    contenders: dict[str, Callable] = {}
    notes: dict[str, str] = {}
    compile_s: dict[str, float] = {}
    if pattern.loop_module is not None:
        module, inputs = pattern.loop_module()
        program, compile_s["fusecc loops"] = cold_loop_compile(module)
        contenders["fusecc loops"] = lambda: program.run(inputs)[0]
        notes["fusecc loops"] = f"{len(program.kernels)} kernels"
        if compare_vectorizers:
            by_llvm, compile_s["fusecc loops, LLVM LV"] = cold_loop_compile(module, vectorize="llvm")
            contenders["fusecc loops, LLVM LV"] = lambda: by_llvm.run(inputs)[0]
            notes["fusecc loops, LLVM LV"] = "vector loops left to LLVM's loop vectoriser"
    contenders["fusecc"], compile_s["fusecc"], notes["fusecc"] = pipeline_contender(pattern)
    contenders["numpy"] = pattern.numpy
    from fusecc.runtime.cpu.executor import default_pool

    torch_fn = torch_contender(pattern.name, pattern.inputs, default_pool().threads)
    if torch_fn is not None:
        contenders["torch"] = torch_fn

    want = np.asarray(pattern.numpy(), dtype=np.float64)
    scale = float(np.max(np.abs(want)))
    for name, fn in contenders.items():
        got = np.asarray(fn(), dtype=np.float64).reshape(want.shape)
        err = float(np.max(np.abs(got - want))) / scale
        if not err <= pattern.rtol:
            raise AssertionError(f"{pattern.name}: {name} differs from numpy by {err:.2e} of the output's scale")
    times = {name: [] for name in contenders}
    order = list(contenders)
    for round_ in range(reps):
        # rotate, so no contender always comes first: the first one of a round
        # tends to pay the page faults of a fresh output allocation
        for name in order[round_ % len(order):] + order[: round_ % len(order)]:
            times[name].append(timed(contenders[name]))
    rows = []
    for name, samples in times.items():
        wall, cpu = np.median(np.array(samples), axis=0)
        rows.append((name, float(wall), float(cpu), compile_s.get(name, float("nan")), notes.get(name, "")))
    return rows


def report(pattern: Pattern, rows) -> str:
    medians = {name: t for name, t, _, _, _ in rows}
    lines = []
    for name, t, cpu, compile_s, note in rows:
        vs_numpy = medians["numpy"] / t
        vs_torch = medians["torch"] / t if "torch" in medians else float("nan")
        rate = ""
        if pattern.flops:
            rate = f"{pattern.flops / t / 1e9:.0f} GFLOP/s"
        elif pattern.bytes:
            rate = f"{pattern.bytes / t / 1e9:.1f} GB/s"
        torch_text = f"{vs_torch:.2f}×" if not math.isnan(vs_torch) else "–"
        compile_text = f"{compile_s * 1e3:.0f}" if not math.isnan(compile_s) else "–"
        lines.append(f"| {pattern.name} | {pattern.shape} | {name} | {t * 1e3:.2f} | {cpu * 1e3:.2f} | {compile_text} | {vs_numpy:.2f}× | {torch_text} | {rate} | {note} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--patterns", default=None, help="comma-separated subset")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=None, help="threads for fusecc (default: the CPUs available)")
    parser.add_argument("--compare-vectorizers", action="store_true", help="add the hand-written loops compiled with LLVM's loop vectoriser instead of explicit SIMD")
    args = parser.parse_args(argv)
    # Compile times are cold: an empty kernel cache for this run (the fusecc
    # row's compile runs in a fresh process with its own empty cache).
    cache_dir = tempfile.TemporaryDirectory(prefix="cpu-bench-cache-")
    os.environ["FUSECC_CACHE_DIR"] = cache_dir.name
    if args.threads:
        from fusecc.runtime.cpu import executor

        executor._default_pool = executor.WorkerPool(args.threads)
    rng = np.random.default_rng(0)
    table = patterns(rng)
    chosen = args.patterns.split(",") if args.patterns else list(table)
    from fusecc.runtime.cpu.executor import default_pool

    print(f"# fusecc on {default_pool().threads} threads, numpy {np.__version__}, median of {args.reps} interleaved runs")
    print("| pattern | shape | contender | wall ms | cpu ms | compile ms | numpy/this | torch/this | rate | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in chosen:
        print(report(table[name], bench(table[name], args.reps, args.compare_vectorizers)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
