"""Parse + verify + print time of programs of 1k, 5k and 20k ops.

The programs are chains of transformer-encoder layers (matmuls, broadcast
bias adds, reshapes and transposes with `perm`, softmax with `axis`,
reductions with `axes`/`keepdims`, layernorm with `epsilon`, splat
constants, cmp/select, slices, gelu with `approximate`), the mix the
compiler sees in practice. Weights are the function's arguments, as in
examples/, so no large constant dominates either side of a comparison.
Run: `python benchmarks/parse_scaling.py [--sizes 1000,5000,20000] [--repeat 3]`.
Each run is a fresh process, so no memo table is warm from an earlier run.
The goal is 20k ops in under 10 s on one core, and a 20k/5k ratio near 4.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

from fusecc.compiler.parser import parse_module
from fusecc.compiler.printer import print_op
from fusecc.compiler.verifier import verify

SEQ, HIDDEN, HEADS, FFN = 128, 256, 4, 1024
HEAD = HIDDEN // HEADS


def t(*shape) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + "f32>"


X, QKV, SCORES, ROW, FF = t(SEQ, HIDDEN), t(SEQ, HEADS, HEAD), t(HEADS, SEQ, SEQ), t(SEQ, 1), t(SEQ, FFN)
HEADED = t(HEADS, SEQ, HEAD)


def layer(i: int, x: str) -> tuple[list[str], str]:
    """One encoder layer reading %x, returning its lines and output name."""
    p = f"l{i}_"
    ops = [f"%{p}bq = tensor.constant {{value = dense<0.0> : {t(HIDDEN)}}} : () -> {t(HIDDEN)}"]
    for name in "qkv":
        ops += [
            f"%{p}{name}0 = tensor.matmul %{x}, %w{name} : ({X}, {t(HIDDEN, HIDDEN)}) -> {X}",
            f"%{p}{name}1 = tensor.add %{p}{name}0, %{p}bq : ({X}, {t(HIDDEN)}) -> {X}",
            f"%{p}{name}2 = tensor.reshape %{p}{name}1 : ({X}) -> {QKV}",
            f"%{p}{name} = tensor.transpose %{p}{name}2 {{perm = [1, 0, 2]}} : ({QKV}) -> {HEADED}",
        ]
    ops += [
        f"%{p}s0 = tensor.matmul %{p}q, %{p}k {{transpose_b = true}} : ({HEADED}, {HEADED}) -> {SCORES}",
        f"%{p}scale = tensor.constant {{value = dense<0.125> : tensor<f32>}} : () -> tensor<f32>",
        f"%{p}s1 = tensor.mul %{p}s0, %{p}scale : ({SCORES}, tensor<f32>) -> {SCORES}",
        f"%{p}zero = tensor.constant {{value = dense<0.0> : tensor<f32>}} : () -> tensor<f32>",
        f"%{p}pos = tensor.cmp %{p}s1, %{p}zero {{predicate = \"gt\"}} : ({SCORES}, tensor<f32>) -> {t(HEADS, SEQ, SEQ)[:-4]}i1>",
        f"%{p}s2 = tensor.select %{p}pos, %{p}s1, %{p}zero : ({t(HEADS, SEQ, SEQ)[:-4]}i1>, {SCORES}, tensor<f32>) -> {SCORES}",
        f"%{p}p = tensor.softmax %{p}s2 {{axis = -1}} : ({SCORES}) -> {SCORES}",
        f"%{p}c0 = tensor.matmul %{p}p, %{p}v : ({SCORES}, {HEADED}) -> {HEADED}",
        f"%{p}c1 = tensor.transpose %{p}c0 {{perm = [1, 0, 2]}} : ({HEADED}) -> {QKV}",
        f"%{p}c2 = tensor.reshape %{p}c1 : ({QKV}) -> {X}",
        f"%{p}o = tensor.matmul %{p}c2, %wo : ({X}, {t(HIDDEN, HIDDEN)}) -> {X}",
        f"%{p}r1 = tensor.add %{x}, %{p}o : ({X}, {X}) -> {X}",
        f"%{p}g = tensor.constant {{value = dense<1.0> : {t(HIDDEN)}}} : () -> {t(HIDDEN)}",
        f"%{p}h = tensor.layernorm %{p}r1, %{p}g, %{p}bq {{epsilon = 1.0e-12}} : ({X}, {t(HIDDEN)}, {t(HIDDEN)}) -> {X}",
        f"%{p}b1 = tensor.constant {{value = dense<0.0> : {t(FFN)}}} : () -> {t(FFN)}",
        f"%{p}f0 = tensor.matmul %{p}h, %w1 : ({X}, {t(HIDDEN, FFN)}) -> {FF}",
        f"%{p}f1 = tensor.add %{p}f0, %{p}b1 : ({FF}, {t(FFN)}) -> {FF}",
        f"%{p}f2 = tensor.gelu %{p}f1 {{approximate = \"tanh\"}} : ({FF}) -> {FF}",
        f"%{p}w2 = tensor.transpose %w1 {{perm = [1, 0]}} : ({t(HIDDEN, FFN)}) -> {t(FFN, HIDDEN)}",
        f"%{p}f3 = tensor.matmul %{p}f2, %{p}w2 : ({FF}, {t(FFN, HIDDEN)}) -> {X}",
        f"%{p}r2 = tensor.add %{p}h, %{p}f3 : ({X}, {X}) -> {X}",
        # A hand-written RMS-style normalisation: reductions with axes/keepdims.
        f"%{p}sq = tensor.mul %{p}r2, %{p}r2 : ({X}, {X}) -> {X}",
        f"%{p}ms = tensor.reduce_mean %{p}sq {{axes = [-1], keepdims = true}} : ({X}) -> {ROW}",
        f"%{p}eps = tensor.constant {{value = dense<1.0e-06> : tensor<f32>}} : () -> tensor<f32>",
        f"%{p}var = tensor.add %{p}ms, %{p}eps : ({ROW}, tensor<f32>) -> {ROW}",
        f"%{p}inv = tensor.rsqrt %{p}var : ({ROW}) -> {ROW}",
        f"%{p}n = tensor.mul %{p}r2, %{p}inv : ({X}, {ROW}) -> {X}",
        f"%{p}mx = tensor.reduce_max %{p}n {{axes = [0]}} : ({X}) -> {t(HIDDEN)}",
        f"%{p}sh = tensor.sub %{p}n, %{p}mx : ({X}, {t(HIDDEN)}) -> {X}",
        f"%{p}head = tensor.slice %{p}sh {{start = [0, 0], stop = [{SEQ}, {HIDDEN}], step = [1, 1]}} : ({X}) -> {X}",
        f"%{p}e = tensor.exp %{p}head : ({X}) -> {X}",
        f"%{p}out = tensor.tanh %{p}e : ({X}) -> {X}",
    ]
    return ops, f"{p}out"


OPS_PER_LAYER = len(layer(0, "x")[0])


def program(num_ops: int) -> str:
    """One function, an unrolled stack of layers sharing their weights (the
    function's arguments): about `num_ops` ops."""
    lines, x = [], "x"
    for i in range(max(1, round((num_ops - 1) / OPS_PER_LAYER))):
        ops, x = layer(i, x)
        lines += ops
    body = "\n".join("  " + op for op in lines)
    weights = f"%wq: {t(HIDDEN, HIDDEN)}, %wk: {t(HIDDEN, HIDDEN)}, %wv: {t(HIDDEN, HIDDEN)}, %wo: {t(HIDDEN, HIDDEN)}, %w1: {t(HIDDEN, FFN)}"
    return f"func.func @model(%x: {X}, {weights}) -> {X} {{\n{body}\n  func.return %{x} : {X}\n}}\n"


def measure(text: str) -> dict:
    """CPU seconds of each phase (steady under machine load), plus wall time."""
    gc.collect()
    wall = time.perf_counter()
    start = time.process_time()
    module = parse_module(text, "bench.ir")
    parsed = time.process_time()
    verify(module)
    verified = time.process_time()
    printed_text = print_op(module)
    done = time.process_time()
    wall = time.perf_counter() - wall
    ops = sum(1 for _ in module.walk()) - 1  # not counting the module
    assert print_op(parse_module(printed_text)) == printed_text
    return {"ops": ops, "parse": parsed - start, "verify": verified - parsed, "print": done - verified, "total": done - start, "wall": wall}


def measure_cold(path: str) -> dict:
    """`measure` of a program file in a fresh process: the process-global
    memo tables (interned types, parsed type spellings, signatures) start
    empty, as for a compiler run. Only the grammar tables are built first,
    from a program that shares nothing with the measured one."""
    code = (
        "import json, pathlib, sys; sys.path.insert(0, sys.argv[1]); import parse_scaling as p; "
        "p.parse_module('func.func @f() {\\n  func.return\\n}\\n'); "
        "print(json.dumps(p.measure(pathlib.Path(sys.argv[2]).read_text())))"
    )
    proc = subprocess.run([sys.executable, "-c", code, os.path.dirname(os.path.abspath(__file__)), path], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"the measuring process failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,20000")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size, each in a fresh process; the median is shown")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {}
    print(f"{'ops':>7} {'parse s':>8} {'verify s':>9} {'print s':>8} {'total s':>8} {'ops/s':>9} {'wall s':>7} {'total range s':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            path = os.path.join(tmp, f"program{size}.ir")
            with open(path, "w") as f:
                f.write(program(size))
            runs = sorted((measure_cold(path) for _ in range(args.repeat)), key=lambda r: r["total"])
            median = runs[len(runs) // 2]
            results[size] = median
            print(
                f"{median['ops']:>7} {median['parse']:>8.3f} {median['verify']:>9.3f} {median['print']:>8.3f} "
                f"{median['total']:>8.3f} {median['ops'] / median['total']:>9.0f} {median['wall']:>7.3f} "
                f"{runs[0]['total']:>6.3f}-{runs[-1]['total']:.3f}"
            )
    if 5000 in results and 20000 in results:
        ratio = results[20000]["total"] / results[5000]["total"]
        ops_ratio = results[20000]["ops"] / results[5000]["ops"]
        print(f"20k/5k time ratio: {ratio:.2f} (ops ratio {ops_ratio:.2f}; linear scaling gives the same number)")
    print("Times are CPU seconds of one fresh process per run (cold memo tables; one core); 'wall s' is elapsed time.")


if __name__ == "__main__":
    main()
