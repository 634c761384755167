"""Accuracy of the tensor-core paths against the reference (issue 13.4),
and ptxas's figures for their kernels.

    python benchmarks/tensor_core_accuracy.py [--examples NAME,...] [--arch sm_90]
    python benchmarks/tensor_core_accuracy.py --ptxas

--ptxas compiles one matmul per tile of matmul_mma.MMA_TILES (a problem
that selects it: M x N x 64 with a bias and GELU) per kind (f16, bf16,
tf32) for sm_80 and sm_90 with NVRTC, and prints registers, spills and
shared memory from ptxas -v.

For each example program (examples/*.ir, as written: f32), the CUDA C run
on this CPU by the harness (the exact emulation of mma.sync, cpu_harness/
cuda_cpu_mma.h) three ways: the default FMA path, with --allow-tf32, and
with every f32 type turned into f16 and into bf16 (inputs rounded; the
reference then computes in that type). Per run: the matmul kernels on
tensor cores, and the error of every result against the reference:

    normwise   max |got - ref| / max |ref|
    elementwise max |got - ref| / |ref|   over elements with |ref| >= 1% of max |ref|

Inputs are `random_input_with_shrunk_weights` (seed 0: weights scaled by
1/sqrt(rows), as initialised). No GPU is needed; the GPU's sums may differ
from the emulation's in the last bits (docs/cuda-tensor-cores.md).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def errors(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    got, want = got.astype(np.float64), want.astype(np.float64)
    scale = np.abs(want).max() or 1.0
    diff = np.abs(got - want)
    large = np.abs(want) >= 0.01 * scale
    return float(diff.max() / scale), float((diff[large] / np.abs(want[large])).max()) if large.any() else 0.0


def run(text: str, name: str, arch: str, allow_tf32: bool):
    from fusecc.compiler import parse_module, verify
    from fusecc.compiler.pass_manager import PassContext
    from fusecc.driver.cuda_level import build_manifest
    from fusecc.driver.cuda_target import ARCH_HARDWARE, lower_to_cuda
    from fusecc.driver.inputs import random_input_with_shrunk_weights
    from fusecc.runtime.cuda.execute import run_on_cpu
    from fusecc.runtime.reference import evaluate

    module = parse_module(text, name)
    verify(module)
    func = module.lookup("main") or module.functions()[0]
    rng = np.random.default_rng(0)
    inputs = [random_input_with_shrunk_weights(t, rng) for t in func.function_type.inputs]
    want = evaluate(module, func.sym_name, inputs)
    compiled = parse_module(text, name)
    cuda = lower_to_cuda(compiled, arch, PassContext(target=ARCH_HARDWARE[arch], allow_tf32=allow_tf32))
    manifest = build_manifest(compiled, cuda, "kernels.cu", arch, func.sym_name)
    outputs = run_on_cpu(manifest, cuda.text, inputs)
    got = [outputs[spec.name] for spec in manifest.outputs]
    on_tensor_cores = len(re.findall(r"^extern \"C\" __global__ .*\n(?:(?!^}).*\n)*?.*fusecc_mma_", cuda.text, re.M))
    worst = [errors(g, w) for g, w in zip(got, want) if np.asarray(w).dtype.kind == "f"]
    return on_tensor_cores, max(e[0] for e in worst), max(e[1] for e in worst)


PTXAS_SHAPES = ((2048, 2048), (1024, 1536), (512, 1024), (129, 384))  # each selects the next tile of MMA_TILES on the H200


def ptxas_table() -> None:
    from fusecc.compiler import parse_module
    from fusecc.compiler.pass_manager import PassContext
    from fusecc.driver.cuda_target import ARCH_HARDWARE, lower_to_cuda
    from fusecc.runtime.cuda.resources import resource_usage

    print(f"{'kind':5} {'arch':6} {'M x N x K':16} {'grid, threads':16} {'registers':>9} {'spill B':>7} {'smem B':>7}")
    for kind, element in (("f16", "f16"), ("bf16", "bf16"), ("tf32", "f32")):
        for arch in ("sm_80", "sm_90"):
            for m, n in PTXAS_SHAPES:
                t = f"tensor<{m}x{n}x{element}>"
                text = (f"func.func @main(%a: tensor<{m}x64x{element}>, %b: tensor<64x{n}x{element}>, %c: tensor<{n}x{element}>) -> {t} {{\n"
                        f"  %0 = tensor.matmul %a, %b : (tensor<{m}x64x{element}>, tensor<64x{n}x{element}>) -> {t}\n"
                        f"  %1 = tensor.add %0, %c : ({t}, tensor<{n}x{element}>) -> {t}\n  %2 = tensor.gelu %1 : ({t}) -> {t}\n  func.return %2 : {t}\n}}\n")
                cuda = lower_to_cuda(parse_module(text), arch, PassContext(target=ARCH_HARDWARE[arch], allow_tf32=True))
                (info,) = [k for k in cuda.kernels if k.kind == "matmul"]
                usage = resource_usage(cuda.text, "kernels.cu", arch)[info.name]
                tile = f"{info.grid[0]}x{info.grid[1]} blocks of {info.block[0]}"
                print(f"{kind:5} {arch:6} {f'{m}x{n}x64':16} {tile:16} {usage.registers:>9} {usage.spill_store_bytes + usage.spill_load_bytes:>7} {usage.shared_bytes:>7}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", default="matmul_bias_relu.ir,mlp.ir,llama_mlp.ir,encoder_block.ir,attention.ir")
    p.add_argument("--arch", default="sm_90", choices=("sm_80", "sm_90"))
    p.add_argument("--ptxas", action="store_true", help="the ptxas table instead")
    args = p.parse_args(argv)
    if args.ptxas:
        ptxas_table()
        return 0
    print(f"{'example':24} {'mode':10} {'mma kernels':>11} {'normwise':>10} {'elementwise':>12}")
    for name in args.examples.split(","):
        text = (EXAMPLES / name).read_text()
        modes = [("f32 FMA", text, False), ("tf32", text, True), ("f16", text.replace("xf32>", "xf16>"), False), ("bf16", text.replace("xf32>", "xbf16>"), False)]
        for mode, source, tf32 in modes:
            try:
                kernels, normwise, elementwise = run(source, name, args.arch, tf32)
            except Exception as exc:  # a program that does not exist in f16 (an f32 constant, say): say so, go on
                print(f"{name:24} {mode:10} {'-':>11} {'':>10} {'':>12}  ({type(exc).__name__}: {str(exc).splitlines()[0][:60]})")
                continue
            print(f"{name:24} {mode:10} {kernels:>11} {normwise:>10.2e} {elementwise:>12.2e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
