"""How much do NVRTC's float modes change the numbers of emitted kernels?

NVRTC contracts `a*b + c` into one fma by default (`--fmad=true`); the CPU
harness compiles the same .cu with g++ in ISO C++ mode, which contracts
nothing. This script runs emitted kernels on the CPU harness both ways —
g++ `-ffp-contract=off` (= `--fmad=false`) and `-mfma -ffp-contract=fast`
(= `--fmad=true`) — and reports each mode's error against a float64
evaluation of the same formula, and how far the two modes are apart.

    python benchmarks/cuda_float_modes.py

docs/cuda-target.md quotes its output and the decision drawn from it.
"""

from __future__ import annotations

import math

import numpy as np

from fusecc.compiler import parse_module, verify
from fusecc.driver.cuda_level import build_manifest
from fusecc.passes.backends.cuda.emit import emit_cuda
from fusecc.runtime.cuda.cpu_harness import loader
from fusecc.runtime.cuda.execute import run_on_cpu

# No vectorisation: a CUDA thread runs scalar code, and g++ would otherwise
# compute some products as vectors and leave them out of any fma.
MODES = {"fmad=false": ("-ffp-contract=off", "-fno-tree-vectorize"), "fmad=true": ("-mfma", "-ffp-contract=fast", "-fno-tree-vectorize")}


def matmul_ir(m: int, n: int, k: int, tile: int = 16) -> str:
    """A shared-memory tiled matmul (the shape of tests/.../matmul_tiled.ir)."""
    return f"""
loop.kernel @matmul {{kind = "matmul"}} {{
^bb0(%a: memref<{m}x{k}xf32>, %b: memref<{k}x{n}xf32>, %c: memref<{m}x{n}xf32>):
  loop.parallel {{upper = [{n // tile}, {m // tile}], mapping = ["block.x", "block.y"]}} {{
  ^bb0(%bn: index, %bm: index):
    %at = loop.alloc : () -> memref<{tile}x{tile}xf32, shared>
    %bt = loop.alloc : () -> memref<{tile}x{tile}xf32, shared>
    loop.parallel {{upper = [{tile}, {tile}], mapping = ["thread.y", "thread.x"]}} {{
    ^bb0(%ty: index, %tx: index):
      %c0 = arith.constant {{value = 0 : index}} : () -> index
      %c1 = arith.constant {{value = 1 : index}} : () -> index
      %ct = arith.constant {{value = {tile} : index}} : () -> index
      %ck = arith.constant {{value = {k} : index}} : () -> index
      %zero = arith.constant {{value = 0.0}} : () -> f32
      %m0 = arith.mul %bm, %ct : (index, index) -> index
      %row = arith.add %m0, %ty : (index, index) -> index
      %n0 = arith.mul %bn, %ct : (index, index) -> index
      %col = arith.add %n0, %tx : (index, index) -> index
      %acc = loop.for %c0, %ck, %ct, %zero : (index, index, index, f32) -> f32 {{
      ^bb0(%k0: index, %acc_in: f32):
        %ak = arith.add %k0, %tx : (index, index) -> index
        %av = loop.load %a, %row, %ak : (memref<{m}x{k}xf32>, index, index) -> f32
        loop.store %av, %at, %ty, %tx : f32, memref<{tile}x{tile}xf32, shared>, index, index
        %bk = arith.add %k0, %ty : (index, index) -> index
        %bv = loop.load %b, %bk, %col : (memref<{k}x{n}xf32>, index, index) -> f32
        loop.store %bv, %bt, %ty, %tx : f32, memref<{tile}x{tile}xf32, shared>, index, index
        loop.barrier
        %dot = loop.for %c0, %ct, %c1, %acc_in : (index, index, index, f32) -> f32 {{
        ^bb0(%kk: index, %d: f32):
          %x = loop.load %at, %ty, %kk : (memref<{tile}x{tile}xf32, shared>, index, index) -> f32
          %y = loop.load %bt, %kk, %tx : (memref<{tile}x{tile}xf32, shared>, index, index) -> f32
          %xy = arith.mul %x, %y : (f32, f32) -> f32
          %s = arith.add %d, %xy : (f32, f32) -> f32
          loop.yield %s : f32
        }}
        loop.barrier
        loop.yield %dot : f32
      }}
      loop.store %acc, %c, %row, %col : f32, memref<{m}x{n}xf32>, index, index
      loop.yield
    }}
    loop.yield
  }}
  loop.return
}}
loop.schedule @main {{inputs = ["a", "b"], outputs = ["c"]}} {{
^bb0(%a: memref<{m}x{k}xf32>, %b: memref<{k}x{n}xf32>, %c: memref<{m}x{n}xf32>):
  loop.launch @matmul(%a, %b, %c) : memref<{m}x{k}xf32>, memref<{k}x{n}xf32>, memref<{m}x{n}xf32>
  loop.return
}}
"""


def variance_ir(rows: int, cols: int) -> str:
    """Per-row variance as E[x²] - E[x]², one thread per row: the textbook
    case where contracting `mean*mean - m2` into an fma changes the answer."""
    return f"""
loop.kernel @variance {{kind = "reduction"}} {{
^bb0(%x: memref<{rows}x{cols}xf32>, %var: memref<{rows}xf32>):
  loop.parallel {{upper = [{rows // 32}], mapping = ["block.x"]}} {{
  ^bb0(%b: index):
    loop.parallel {{upper = [32], mapping = ["thread.x"]}} {{
    ^bb0(%t: index):
      %c0 = arith.constant {{value = 0 : index}} : () -> index
      %c1 = arith.constant {{value = 1 : index}} : () -> index
      %c32 = arith.constant {{value = 32 : index}} : () -> index
      %cn = arith.constant {{value = {cols} : index}} : () -> index
      %zero = arith.constant {{value = 0.0}} : () -> f32
      %inv = arith.constant {{value = {1.0 / cols!r}}} : () -> f32
      %r0 = arith.mul %b, %c32 : (index, index) -> index
      %row = arith.add %r0, %t : (index, index) -> index
      %s:2 = loop.for %c0, %cn, %c1, %zero, %zero : (index, index, index, f32, f32) -> (f32, f32) {{
      ^bb0(%j: index, %sum: f32, %sq: f32):
        %v = loop.load %x, %row, %j : (memref<{rows}x{cols}xf32>, index, index) -> f32
        %sum2 = arith.add %sum, %v : (f32, f32) -> f32
        %vv = arith.mul %v, %v : (f32, f32) -> f32
        %sq2 = arith.add %sq, %vv : (f32, f32) -> f32
        loop.yield %sum2, %sq2 : f32, f32
      }}
      %mean = arith.mul %s#0, %inv : (f32, f32) -> f32
      %m2 = arith.mul %s#1, %inv : (f32, f32) -> f32
      %mm = arith.mul %mean, %mean : (f32, f32) -> f32
      %v = arith.sub %m2, %mm : (f32, f32) -> f32
      loop.store %v, %var, %row : f32, memref<{rows}xf32>, index
      loop.yield
    }}
    loop.yield
  }}
  loop.return
}}
loop.schedule @main {{inputs = ["x"], outputs = ["var"]}} {{
^bb0(%x: memref<{rows}x{cols}xf32>, %var: memref<{rows}xf32>):
  loop.launch @variance(%x, %var) : memref<{rows}x{cols}xf32>, memref<{rows}xf32>
  loop.return
}}
"""


def gelu_ir(n: int) -> str:
    """The tanh GELU, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), elementwise."""
    return f"""
loop.kernel @gelu {{kind = "elementwise"}} {{
^bb0(%x: memref<{n}xf32>, %y: memref<{n}xf32>):
  loop.parallel {{upper = [{n // 256}], mapping = ["block.x"]}} {{
  ^bb0(%b: index):
    loop.parallel {{upper = [256], mapping = ["thread.x"]}} {{
    ^bb0(%t: index):
      %c256 = arith.constant {{value = 256 : index}} : () -> index
      %i0 = arith.mul %b, %c256 : (index, index) -> index
      %i = arith.add %i0, %t : (index, index) -> index
      %v = loop.load %x, %i : (memref<{n}xf32>, index) -> f32
      %k = arith.constant {{value = 0.044715}} : () -> f32
      %c = arith.constant {{value = {math.sqrt(2 / math.pi)!r}}} : () -> f32
      %half = arith.constant {{value = 0.5}} : () -> f32
      %one = arith.constant {{value = 1.0}} : () -> f32
      %v2 = arith.mul %v, %v : (f32, f32) -> f32
      %v3 = arith.mul %v2, %v : (f32, f32) -> f32
      %kv3 = arith.mul %k, %v3 : (f32, f32) -> f32
      %inner = arith.add %v, %kv3 : (f32, f32) -> f32
      %arg = arith.mul %c, %inner : (f32, f32) -> f32
      %th = math.tanh %arg : (f32) -> f32
      %p = arith.add %one, %th : (f32, f32) -> f32
      %hv = arith.mul %half, %v : (f32, f32) -> f32
      %out = arith.mul %hv, %p : (f32, f32) -> f32
      loop.store %out, %y, %i : f32, memref<{n}xf32>, index
      loop.yield
    }}
    loop.yield
  }}
  loop.return
}}
loop.schedule @main {{inputs = ["x"], outputs = ["y"]}} {{
^bb0(%x: memref<{n}xf32>, %y: memref<{n}xf32>):
  loop.launch @gelu(%x, %y) : memref<{n}xf32>, memref<{n}xf32>
  loop.return
}}
"""


def cases(rng: np.random.Generator):
    a = rng.standard_normal((64, 1024), dtype=np.float32)
    b = rng.standard_normal((1024, 64), dtype=np.float32)
    yield "matmul 64x1024 @ 1024x64", matmul_ir(64, 64, 1024), [a, b], a.astype(np.float64) @ b.astype(np.float64)
    x = (100.0 + rng.standard_normal((64, 1000))).astype(np.float32)
    x64 = x.astype(np.float64)
    yield "variance E[x²]-E[x]², mean 100", variance_ir(64, 1000), [x], x64.var(axis=1)
    g = (3 * rng.standard_normal(1 << 16)).astype(np.float32)
    g64 = g.astype(np.float64)
    expected = 0.5 * g64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (g64 + 0.044715 * g64**3)))
    yield "gelu (tanh) 65536", gelu_ir(1 << 16), [g], expected


def run(text: str, inputs, extra_flags) -> np.ndarray:
    module = parse_module(text, "bench.ir")
    verify(module)
    cuda = emit_cuda(module)
    saved = loader.CXX_FLAGS
    loader.CXX_FLAGS = (*saved, *extra_flags)
    try:
        (out,) = run_on_cpu(build_manifest(module, cuda), cuda.text, inputs).values()
    finally:
        loader.CXX_FLAGS = saved
    return out.astype(np.float64)


def main() -> None:
    rng = np.random.default_rng(0)
    print("errors against float64; 'normwise' divides by the largest |exact value|, 'ulps' counts f32 ulps of each value")
    print(f"{'kernel':32} {'mode':10} {'max |err|':>10} {'normwise':>10} {'median ulps':>12} {'max ulps':>10}")
    for name, text, inputs, exact in cases(rng):
        results = {}
        norm = np.max(np.abs(exact))
        ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
        for mode, flags in MODES.items():
            out = results[mode] = run(text, inputs, flags)
            err = np.abs(out - exact)
            print(f"{name:32} {mode:10} {err.max():10.3g} {err.max() / norm:10.3g} {np.median(err / ulp):12.3g} {np.max(err / ulp):10.3g}")
        a, b = results.values()
        apart = np.abs(a - b)
        print(f"{'':32} {'apart':10} {apart.max():10.3g} {apart.max() / norm:10.3g} {np.median(apart / ulp):12.3g} {np.max(apart / ulp):10.3g}  ({np.mean(a != b):.0%} of values differ)")


if __name__ == "__main__":
    main()
