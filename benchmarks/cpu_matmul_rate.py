"""The GFLOP/s the generated CPU matmul kernels reach: the source of the `cpu`
entry's `peak_flops` in passes/backends/hardware.py (the cost model's matmul rate).

    python benchmarks/cpu_matmul_rate.py [--reps 15] [--threads 1,2]

Each shape is one tensor program (a matmul, or sibling matmuls merged on
concatenated weights as `fuse` merges Q/K/V) through the CPU pipeline of
`fusecc run`; every kernel launch is timed by the runtime's profile. Shapes
are the projections of examples/encoder_block.ir and examples/llama_block.ir
(128 tokens) and the MLP of benchmarks/cpu_bench.py. The table gives, per
thread count, the best and the median GFLOP/s over the runs: on a shared
machine the best is the rate the kernel reaches when it has the cores, the
median what it got. Figures, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

from fusecc.compiler import parse_module, verify
from fusecc.compiler.pass_manager import PassContext, run_pipeline
from fusecc.runtime.cpu.executor import CompiledProgram, WorkerPool
from fusecc.driver.cpu_target import loop_pipeline
from fusecc.driver.inputs import random_input_with_shrunk_weights

# name -> (M, K, [N per sibling]); several Ns: merged siblings (concatenated weights)
SHAPES = {
    "encoder qkv (merged)": (128, 768, [768, 768, 768]),
    "encoder ffn up": (128, 768, [3072]),
    "encoder ffn down": (128, 3072, [768]),
    "llama qkv (merged)": (128, 1024, [1024, 1024, 1024]),
    "llama q alone": (128, 1024, [1024]),
    "llama gate": (128, 1024, [2816]),
    "llama down": (128, 2816, [1024]),
    "mlp up": (512, 768, [3072]),
}


def program(m: int, k: int, ns: list[int]) -> str:
    """x @ w, or x @ concat(w_i) for several Ns: the merged matmul as `fuse`
    makes it of sibling projections (written merged, so that its result is
    one output)."""
    t = "tensor<{}xf32>".format
    weights = ", ".join(f"%w{i}: {t(f'{k}x{n}')}" for i, n in enumerate(ns))
    total = sum(ns)
    lines = [f"func.func @main(%x: {t(f'{m}x{k}')}, {weights}) -> {t(f'{m}x{total}')} {{"]
    w = "%w0"
    if len(ns) > 1:
        pieces = ", ".join(f"%w{i}" for i in range(len(ns)))
        lines.append(f"  %w = tensor.concat {pieces} {{axis = 1}} : ({', '.join(t(f'{k}x{n}') for n in ns)}) -> {t(f'{k}x{total}')}")
        w = "%w"
    lines.append(f"  %y = tensor.matmul %x, {w} : ({t(f'{m}x{k}')}, {t(f'{k}x{total}')}) -> {t(f'{m}x{total}')}")
    lines.append(f"  func.return %y : {t(f'{m}x{total}')}")
    lines.append("}")
    return "\n".join(lines)


def kernel_rates(m: int, k: int, ns: list[int], threads: int, reps: int) -> tuple[float, float, int]:
    """(best, median GFLOP/s of the matmul kernels' time in a run, kernels)."""
    module = parse_module(program(m, k, ns))
    verify(module)
    func = module.lookup("main")
    rng = np.random.default_rng(0)
    inputs = [random_input_with_shrunk_weights(t, rng) for t in func.function_type.inputs]
    run_pipeline(loop_pipeline(), module, PassContext(target="cpu"))
    compiled = CompiledProgram(module, pool=WorkerPool(threads))
    compiled.run(inputs, "main")  # warm-up (and compilation)
    seconds = []
    kernels = 0
    for _ in range(reps):
        profile: list = []
        compiled.run(inputs, "main", profile=profile)
        matmuls = [s for name, s in profile if "matmul" in name]
        kernels = len(matmuls)
        seconds.append(sum(matmuls))
    flops = 2.0 * m * k * sum(ns)
    return flops / min(seconds) / 1e9, flops / statistics.median(seconds) / 1e9, kernels


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated names of SHAPES")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.threads.split(",")]
    header = "| shape | M×K×N | kernels | " + " | ".join(f"{c} thread{'s' * (c > 1)}: best / median GFLOP/s" for c in counts) + " |"
    print(header)
    print("|" + "---|" * (3 + len(counts)))
    for name in args.shapes.split(","):
        m, k, ns = SHAPES[name]
        cells = []
        kernels = 0
        for c in counts:
            best, median, kernels = kernel_rates(m, k, ns, c, args.reps)
            cells.append(f"{best:.0f} / {median:.0f}")
        print(f"| {name} | {m}×{k}×{'+'.join(map(str, ns))} | {kernels} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
