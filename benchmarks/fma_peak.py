"""The machine's single-core fp32 FMA peak, measured: an LLVM-compiled loop of
independent FMA chains on the widest vectors the host has (AVX-512 zmm, else
AVX2 ymm), timed in the calling thread's CPU time. It bounds what any matmul
on one core can reach (fusecc's, OpenBLAS's, MKL's under torch), so a model's
FLOPs divided by it is the floor of its 1-thread time.

    python benchmarks/fma_peak.py [--chains 12] [--repeats 7]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time

import llvmlite.binding as llvm

from fusecc.runtime.cpu import jit

ITERATIONS = 20_000_000


def kernel_text(lanes: int, chains: int) -> str:
    """`fma_loop(n)`: n iterations of `chains` independent vector FMAs (each
    chain's latency is hidden by the others), summed at the end so that
    none is dead code."""
    vty = f"<{lanes} x float>"
    phis, fmas = [], []
    for c in range(chains):
        phis.append(f"  %a{c} = phi {vty} [ splat (float 1.0), %entry ], [ %n{c}, %loop ]")
        fmas.append(f"  %n{c} = call {vty} @llvm.fma.v{lanes}f32({vty} %a{c}, {vty} splat (float 0x3FF0000020000000), {vty} splat (float 0x3E80000000000000))")
    sums = [f"  %s0 = fadd {vty} %n0, %n0"] + [f"  %s{c} = fadd {vty} %s{c - 1}, %n{c}" for c in range(1, chains)]
    return "\n".join([
        "define float @fma_loop(i64 %n) {",
        "entry:",
        "  br label %loop",
        "loop:",
        "  %i = phi i64 [ 0, %entry ], [ %next, %loop ]",
        *phis,
        *fmas,
        "  %next = add i64 %i, 1",
        "  %done = icmp eq i64 %next, %n",
        "  br i1 %done, label %exit, label %loop",
        "exit:",
        *sums,
        f"  %r = extractelement {vty} %s{chains - 1}, i64 0",
        "  ret float %r",
        "}",
        f"declare {vty} @llvm.fma.v{lanes}f32({vty}, {vty}, {vty})",
    ]) + "\n"


def measure(chains: int, repeats: int, iterations: int = ITERATIONS) -> tuple[int, list[float]]:
    """(vector lanes, GFLOP/s of each repeat)."""
    lanes = 16 if "avx512f" in jit.host_isa() else 8
    module = jit.optimise(kernel_text(lanes, chains))
    engine = llvm.create_mcjit_compiler(module, jit.new_target_machine())
    engine.finalize_object()
    loop = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64)(engine.get_function_address("fma_loop"))
    loop(1000)
    rates = []
    for _ in range(repeats):
        start = time.thread_time()
        loop(iterations)
        seconds = time.thread_time() - start
        rates.append(2 * lanes * chains * iterations / max(seconds, 1e-9) / 1e9)
    return lanes, rates


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=12, help="independent FMA chains (enough to cover latency x ports)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    args = parser.parse_args(argv)
    lanes, rates = measure(args.chains, args.repeats, args.iterations)
    print(f"fp32 FMA peak, 1 thread, {lanes}-lane vectors, {args.chains} chains: median {statistics.median(rates):.1f} GFLOP/s "
          f"(range {min(rates):.1f}-{max(rates):.1f}, {args.repeats} runs of {args.iterations} iterations, thread CPU time)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
