"""The GPU matmul and attention kernels as CUDA C: NVRTC compiles them for
sm_90 without spills, within the register estimate the tiler and cost model
use, and the CPU harness runs them to the reference's numbers.

Needs NVRTC and a host C++ compiler (skipped without them); no GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from template_harness import group_module, lower_group

from fusecc.passes.backends.hardware import H200
from fusecc.compiler.types import TensorType, f16, f32
from fusecc.dialects import tensor as T
from fusecc.dialects.fusion import GroupOp
from fusecc.passes.lowering.attention import AttentionProblem, attention_tiles
from fusecc.passes.tiling.attention_tiles import gpu_attention_resources
from fusecc.passes.lowering.matmul_mma import choose_mma_tiles, mma_kind, mma_resources
from fusecc.passes.lowering.matmul import MatmulProblem, gpu_matmul_resources, gpu_matmul_tiles
from fusecc.driver import cuda_level
from fusecc.passes.backends.cuda.emit import emit_cuda
from fusecc.runtime.cuda import execute, resources
from fusecc.runtime.cuda.cpu_harness.loader import HostCompilerMissing
from fusecc.runtime.cuda.nvrtc import NvrtcUnavailable
from fusecc.runtime.reference import evaluate, random_input


def t(*shape, element=f32):
    return TensorType(shape, element)


def bias_gelu(b, a, **attrs):
    product = b.create(T.MatmulOp, [a[0], a[1]], attrs or None).result
    return [b.create(T.GeluOp, [b.create(T.AddOp, [product, a[2]]).result], {"approximate": "tanh"}).result]


def merged_bias_gelu(b, a):
    """x @ concat(w_i) + concat(b_i), gelu: sibling projections merged by `fuse`."""
    pieces = (len(a) - 1) // 2
    weights = b.create(T.ConcatOp, a[1 : 1 + pieces], {"axis": 1}).result
    biases = b.create(T.ConcatOp, a[1 + pieces :], {"axis": 0}).result
    return bias_gelu(b, [a[0], weights, biases])


def attention(b, a, **attrs):
    return [b.create(T.AttentionOp, a, attrs or None).result]


LARGE = {
    "matmul_1024": lambda: group_module("matmul", [t(1024, 1024), t(1024, 1024), t(1024)], bias_gelu),
    "matmul_4096_8x8": lambda: group_module("matmul", [t(4096, 4096), t(4096, 4096), t(4096)], bias_gelu),
    "matmul_tiler_128x128x32": lambda: group_module(
        "matmul", [t(4096, 4096), t(4096, 4096), t(4096)], bias_gelu, {"tile.block": [128, 128], "tile.k": 32, "tile.threads": 256}
    ),
    "matmul_qkv_concatenated": lambda: group_module("matmul", [t(512, 1024)] + [t(1024, 1024)] * 3 + [t(1024)] * 3, merged_bias_gelu),
    "matmul_f16_batched": lambda: group_module("matmul", [t(8, 512, 64, element=f16), t(8, 64, 512, element=f16)], lambda b, a: [b.create(T.MatmulOp, a).result]),
    "attention_d64": lambda: group_module("attention", [t(16, 1024, 64)] * 3, lambda b, a: attention(b, a, causal=True)),
    "attention_d128": lambda: group_module("attention", [t(16, 1024, 128)] * 3, lambda b, a: attention(b, a, causal=True)),
}


def estimate(module) -> int:
    group = next(op for op in module.walk() if isinstance(op, GroupOp))
    if group.attr("kind") == "matmul":
        problem = MatmulProblem.of(group)
        kind = mma_kind(group, problem, H200)  # tensor cores (matmul_mma.py) have their own estimate
        if kind is not None:
            return mma_resources(choose_mma_tiles(problem, H200), kind).registers_per_thread
        return gpu_matmul_resources(gpu_matmul_tiles(group, problem, H200), problem.result.type.element_type).registers_per_thread
    problem = AttentionProblem.of(group)
    return gpu_attention_resources(attention_tiles(group, problem, H200), problem).registers_per_thread


@pytest.mark.parametrize("name", sorted(LARGE))
def test_kernels_compile_without_spills_within_the_register_estimate(name):
    module = LARGE[name]()
    cuda = emit_cuda(lower_group(module, H200), f"{name}.ir")
    try:
        (usage,) = resources.resource_usage(cuda.text, f"{name}.cu", "sm_90").values()
    except NvrtcUnavailable as exc:
        pytest.skip(f"NVRTC unavailable: {exc}")
    assert not usage.spills
    assert usage.registers <= 1.15 * estimate(module), f"ptxas uses {usage.registers} registers, the estimate says {estimate(module)}"


SMALL = {
    "matmul_odd_bias_gelu": lambda: group_module("matmul", [t(37, 45), t(45, 70), t(70)], bias_gelu),
    "matmul_concatenated_odd_pieces": lambda: group_module("matmul", [t(37, 45), t(45, 70), t(45, 21), t(70), t(21)], merged_bias_gelu),
    "matmul_batched_transposed": lambda: group_module("matmul", [t(2, 37, 45), t(70, 45), t(70)], lambda b, a: bias_gelu(b, a, transpose_b=True)),
    "attention_mask_odd": lambda: group_module("attention", [t(3, 77, 32), t(3, 90, 32), t(3, 90, 24), t(77, 90)], attention),
    "attention_causal": lambda: group_module("attention", [t(2, 100, 64)] * 3, lambda b, a: attention(b, a, causal=True)),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_kernels_compute_the_reference_on_the_cpu_harness(name, tmp_path_factory):
    module = SMALL[name]()
    lowered = lower_group(module, H200)
    cuda = emit_cuda(lowered, f"{name}.ir")
    rng = np.random.default_rng(0)
    inputs = [random_input(a.type, rng) for a in module.lookup("main").body.args]
    cache = tmp_path_factory.getbasetemp().parent / "fusecc-cuda-cache"
    cache.mkdir(exist_ok=True)
    try:
        got = execute.run_on_cpu(cuda_level.build_manifest(lowered, cuda, f"{name}.cu"), cuda.text, inputs, cache_dir=cache)
    except HostCompilerMissing as exc:
        pytest.skip(f"no host compiler for the CPU harness: {exc}")
    (expected,) = evaluate(module, "main", inputs)
    (out,) = got.values()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
