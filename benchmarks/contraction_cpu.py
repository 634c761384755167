"""Matmul with a fused epilogue and flash attention on the CPU target, side
by side with numpy in one process (medians of --repeat runs).

    matmul  gelu_tanh(x @ w + b): fusecc's one kernel vs numpy's BLAS matmul
            alone and vs numpy's matmul + epilogue (the goal: at least 0.5x
            the BLAS matmul's throughput with the epilogue fused)
    attention  softmax(q kᵀ / √D [causal]) v over B heads: the flash kernel
            (O(S·D) memory) vs numpy materialising the S×T scores

Run: `python benchmarks/contraction_cpu.py [--threads N] [--repeat 5]`;
`--threads 1` compares one core with single-threaded BLAS (steadier on a
busy machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=0, help="worker threads (and BLAS threads); 0: all cores")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if args.threads:
        os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(args.threads)

    import numpy as np

    from fusecc.compiler import parse_module
    from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
    from fusecc.runtime.cpu import executor
    from fusecc.runtime.reference import attention, gelu

    if args.threads:
        executor._default_pool = executor.WorkerPool(args.threads)

    def compiled(text: str):
        module = parse_module(text)
        run_pipeline(parse_pipeline("tile{target=cpu},lower-to-loops{target=cpu},plan-memory"), module, PassContext(target="cpu"))
        return executor.compile_program(module)

    def median(fn) -> float:
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    rng = np.random.default_rng(0)
    print(f"{'matmul + bias + gelu':32} {'fusecc':>10} {'BLAS mm':>10} {'numpy mm+epi':>13} {'vs BLAS mm':>11}")
    for m, k, n in ((512, 512, 512), (1024, 1024, 1024), (128, 768, 3072)):
        t = lambda *s: "tensor<" + "x".join(map(str, s)) + "xf32>"
        program = compiled(f"""
func.func @main(%x: {t(m, k)}, %w: {t(k, n)}, %b: {t(n)}) -> {t(m, n)} {{
  %r = fusion.group %x, %w, %b {{kind = "matmul"}} : ({t(m, k)}, {t(k, n)}, {t(n)}) -> {t(m, n)} {{
  ^bb0(%a: {t(m, k)}, %c: {t(k, n)}, %d: {t(n)}):
    %0 = tensor.matmul %a, %c : ({t(m, k)}, {t(k, n)}) -> {t(m, n)}
    %1 = tensor.add %0, %d : ({t(m, n)}, {t(n)}) -> {t(m, n)}
    %2 = tensor.gelu %1 {{approximate = "tanh"}} : ({t(m, n)}) -> {t(m, n)}
    fusion.yield %2 : {t(m, n)}
  }}
  func.return %r : {t(m, n)}
}}""")
        x, w, b = (rng.standard_normal(s, dtype=np.float32) for s in ((m, k), (k, n), (n,)))
        got = program.run([x, w, b])[0]
        np.testing.assert_allclose(got, gelu(x @ w + b, "tanh"), rtol=1e-4, atol=1e-4)
        ours = median(lambda: program.run([x, w, b]))
        blas = median(lambda: x @ w)
        both = median(lambda: gelu(x @ w + b, "tanh"))
        gflops = 2 * m * n * k / 1e9
        print(f"{f'{m}x{k}x{n}':32} {gflops / ours:7.1f} GF/s {gflops / blas:6.1f} GF/s {gflops / both:9.1f} GF/s {blas / ours:10.2f}x")

    print(f"\n{'attention':32} {'fusecc':>10} {'numpy':>10} {'speed-up':>9}")
    for heads, s, d, causal in ((8, 1024, 64, False), (8, 1024, 64, True), (16, 512, 128, False)):
        shape = f"tensor<{heads}x{s}x{d}xf32>"
        program = compiled(f"""
func.func @main(%q: {shape}, %k: {shape}, %v: {shape}) -> {shape} {{
  %o = tensor.attention %q, %k, %v {{causal = {str(causal).lower()}}} : ({shape}, {shape}, {shape}) -> {shape}
  func.return %o : {shape}
}}""")
        q, k_, v = (rng.standard_normal((heads, s, d), dtype=np.float32) for _ in range(3))
        expected = attention(q, k_, v, None, 1 / np.sqrt(d), causal)
        np.testing.assert_allclose(program.run([q, k_, v])[0], expected, rtol=1e-4, atol=1e-5)
        ours = median(lambda: program.run([q, k_, v]))
        ref = median(lambda: attention(q, k_, v, None, 1 / np.sqrt(d), causal))
        print(f"{f'{heads}x{s}x{d}' + (' causal' if causal else ''):32} {ours * 1e3:7.1f} ms {ref * 1e3:7.1f} ms {ref / ours:8.2f}x")


if __name__ == "__main__":
    sys.exit(main())
