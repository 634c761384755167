"""Issue 16, bugs C, E and F (and an empty matmul the fuzzer found): valid programs the CPU target or the CUDA C
refused or crashed on, run against the reference on the CPU target and as
CUDA C on the CPU harness. The golden halves: tests/filecheck/passes/fusion/
attention_layout_users.ir (C) and siblings_shared_bias.ir (E)."""

from __future__ import annotations

import numpy as np
import pytest

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.compiler.parser import parse_module
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.compiler.verifier import verify
from fusecc.driver import targets
from fusecc.driver.pipelines import pipeline_for_level
from fusecc.runtime.reference import evaluate

ATTENTION = "(tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>"

PROGRAMS = {
    # C: a layout op that is no epilogue consumes the attention result
    "slice_of_attention": f"""
func.func @main(%q: tensor<2x8x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x8x16xf32>) -> tensor<2x4x16xf32> {{
  %0 = tensor.attention %q, %k, %v : {ATTENTION}
  %1 = tensor.slice %0 {{start = [0, 7, 0], stop = [2, -9, 16], step = [1, -2, 1]}} : (tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
  func.return %1 : tensor<2x4x16xf32>
}}""",
    "concat_of_attention": f"""
func.func @main(%q: tensor<2x8x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x8x16xf32>) -> tensor<8x4x16xf32> {{
  %0 = tensor.attention %q, %k, %v : {ATTENTION}
  %1 = tensor.transpose %0 {{perm = [1, 0, 2]}} : (tensor<2x8x16xf32>) -> tensor<8x2x16xf32>
  %2 = tensor.concat %1, %1 {{axis = -2}} : (tensor<8x2x16xf32>, tensor<8x2x16xf32>) -> tensor<8x4x16xf32>
  func.return %2 : tensor<8x4x16xf32>
}}""",
    "broadcast_of_attention": f"""
func.func @main(%q: tensor<2x8x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x8x16xf32>) -> tensor<3x2x8x16xf32> {{
  %0 = tensor.attention %q, %k, %v : {ATTENTION}
  %1 = tensor.broadcast_to %0 : (tensor<2x8x16xf32>) -> tensor<3x2x8x16xf32>
  func.return %1 : tensor<3x2x8x16xf32>
}}""",
    # E: sibling matmuls sharing one bias (an argument, a splat, a dense constant)
    "shared_bias": """
func.func @main(%x: tensor<128x64xf32>, %w1: tensor<64x256xf32>, %w2: tensor<64x256xf32>, %b: tensor<256xf32>) -> (tensor<128x256xf32>, tensor<128x256xf32>) {
  %0 = tensor.matmul %x, %w1 : (tensor<128x64xf32>, tensor<64x256xf32>) -> tensor<128x256xf32>
  %1 = tensor.add %0, %b : (tensor<128x256xf32>, tensor<256xf32>) -> tensor<128x256xf32>
  %2 = tensor.matmul %x, %w2 : (tensor<128x64xf32>, tensor<64x256xf32>) -> tensor<128x256xf32>
  %3 = tensor.add %2, %b : (tensor<128x256xf32>, tensor<256xf32>) -> tensor<128x256xf32>
  func.return %1, %3 : tensor<128x256xf32>, tensor<128x256xf32>
}""",
    "shared_splat_bias": """
func.func @main(%x: tensor<128x64xf32>, %w1: tensor<64x256xf32>, %w2: tensor<64x256xf32>) -> (tensor<128x256xf32>, tensor<128x256xf32>) {
  %b = tensor.constant {value = dense<0.5> : tensor<256xf32>} : () -> tensor<256xf32>
  %0 = tensor.matmul %x, %w1 : (tensor<128x64xf32>, tensor<64x256xf32>) -> tensor<128x256xf32>
  %1 = tensor.add %0, %b : (tensor<128x256xf32>, tensor<256xf32>) -> tensor<128x256xf32>
  %2 = tensor.matmul %x, %w2 : (tensor<128x64xf32>, tensor<64x256xf32>) -> tensor<128x256xf32>
  %3 = tensor.add %2, %b : (tensor<128x256xf32>, tensor<256xf32>) -> tensor<128x256xf32>
  func.return %1, %3 : tensor<128x256xf32>, tensor<128x256xf32>
}""",
    # fuzz seed 3564: an attention whose head dim no GPU attention tile holds in shared memory
    # (D = 8192) is decomposed by fusion (tests/filecheck/passes/fusion/attention_resource_limit.ir)
    "attention_long_head_dim": """
func.func @main(%q: tensor<1x8192xf32>, %k: tensor<3x8192xf32>, %v: tensor<3x2xf32>, %m: tensor<3xf32>) -> tensor<1x2xf32> {
  %0 = tensor.attention %q, %k, %v, %m : (tensor<1x8192xf32>, tensor<3x8192xf32>, tensor<3x2xf32>, tensor<3xf32>) -> tensor<1x2xf32>
  func.return %0 : tensor<1x2xf32>
}""",
    # fuzz seeds 13 and 145: the GPU cost model divided by zero on empty grids (a launch of no
    # blocks that still reads bytes: gpu_time; an attention over an empty batch: attention_seconds)
    "empty_grid_costs": """
func.func @main(%a1: tensor<5x1xf32>) -> (tensor<1x1xbf16>, tensor<f32>, tensor<3x0xf32>) {
  %v2 = tensor.slice %a1 {start = [-6, 0], stop = [-2, -2], step = [1, 1]} : (tensor<5x1xf32>) -> tensor<3x0xf32>
  %v3 = tensor.softmax %v2 : (tensor<3x0xf32>) -> tensor<3x0xf32>
  %v4 = tensor.broadcast_to %v2 : (tensor<3x0xf32>) -> tensor<1x3x0xf32>
  %v6 = tensor.reduce_mean %v4 {axes = [1, 0, 2], keepdims = false} : (tensor<1x3x0xf32>) -> tensor<f32>
  %v7 = tensor.reduce_mean %v3 {axes = [-2, 1], keepdims = true} : (tensor<3x0xf32>) -> tensor<1x1xf32>
  %v8 = tensor.cast %v7 : (tensor<1x1xf32>) -> tensor<1x1xbf16>
  func.return %v8, %v6, %v3 : tensor<1x1xbf16>, tensor<f32>, tensor<3x0xf32>
}""",
    "empty_batch_attention_bf16": """
func.func @main(%q: tensor<2x0x0x4xbf16>, %k: tensor<2x0x4x4xbf16>, %v: tensor<2x0x4x8xbf16>) -> tensor<2x0x0x8xbf16> {
  %0 = tensor.attention %q, %k, %v {scale = 0.125, causal = true} : (tensor<2x0x0x4xbf16>, tensor<2x0x4x4xbf16>, tensor<2x0x4x8xbf16>) -> tensor<2x0x0x8xbf16>
  func.return %0 : tensor<2x0x0x8xbf16>
}""",
    # F: zero-size arguments, intermediates and results
    "empty_tensors": """
func.func @main(%x: tensor<3x4xf32>, %e: tensor<0x4xf32>) -> (tensor<0x4xf32>, tensor<4xf32>, tensor<3x4xf32>, tensor<3x0xf32>) {
  %0 = tensor.slice %x {start = [3, 0], stop = [3, 4], step = [1, 1]} : (tensor<3x4xf32>) -> tensor<0x4xf32>
  %1 = tensor.add %0, %e : (tensor<0x4xf32>, tensor<0x4xf32>) -> tensor<0x4xf32>
  %2 = tensor.reduce_sum %1 {axes = [0]} : (tensor<0x4xf32>) -> tensor<4xf32>
  %3 = tensor.concat %x, %e {axis = 0} : (tensor<3x4xf32>, tensor<0x4xf32>) -> tensor<3x4xf32>
  %4 = tensor.reduce_max %x {axes = [1], keepdims = true} : (tensor<3x4xf32>) -> tensor<3x1xf32>
  %5 = tensor.slice %4 {start = [0, 1], stop = [3, 1], step = [1, 1]} : (tensor<3x1xf32>) -> tensor<3x0xf32>
  func.return %1, %2, %3, %5 : tensor<0x4xf32>, tensor<4xf32>, tensor<3x4xf32>, tensor<3x0xf32>
}""",
    # found by the fuzzer: a matmul with no rows divided by its zero-row register tile
    "empty_matmul": """
func.func @main(%a: tensor<2x0x3xf32>, %w: tensor<2x3x4xf32>) -> tensor<2x0x4xf32> {
  %0 = tensor.matmul %a, %w : (tensor<2x0x3xf32>, tensor<2x3x4xf32>) -> tensor<2x0x4xf32>
  func.return %0 : tensor<2x0x4xf32>
}""",
    # found by the fuzzer: a group whose results are all empty (here an attention over an
    # empty batch) launched a template that indexed blocks modulo the empty sizes
    "empty_attention": """
func.func @main(%q: tensor<1x0x0x1xf32>, %k: tensor<1x0x1x1xf32>, %v: tensor<1x0x1x1xf32>) -> tensor<0xf32> {
  %0 = tensor.attention %q, %k, %v {causal = true} : (tensor<1x0x0x1xf32>, tensor<1x0x1x1xf32>, tensor<1x0x1x1xf32>) -> tensor<1x0x0x1xf32>
  %1 = tensor.reshape %0 : (tensor<1x0x0x1xf32>) -> tensor<0xf32>
  func.return %1 : tensor<0xf32>
}""",
    # found by the fuzzer: a head dim of 0 (the scores are empty sums): the GPU template shared
    # an empty q tile out among its threads modulo 0
    "attention_no_head_dim": """
func.func @main(%q: tensor<2x3x0xf32>, %k: tensor<2x4x0xf32>, %v: tensor<2x4x5xf32>) -> tensor<2x3x5xf32> {
  %0 = tensor.attention %q, %k, %v {causal = true} : (tensor<2x3x0xf32>, tensor<2x4x0xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
  func.return %0 : tensor<2x3x5xf32>
}""",
}


def parse(text: str):
    module = parse_module(text, "issue16.ir")
    verify(module)
    return module


def inputs(module) -> list[np.ndarray]:
    rng = np.random.default_rng(16)
    return [rng.standard_normal(t.shape).astype(np.float32) for t in module.lookup("main").function_type.inputs]


def check(got, expected) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", PROGRAMS)
def test_runs_on_the_cpu_target(name):
    module = parse(PROGRAMS[name])
    args = inputs(module)
    expected = evaluate(module, "main", args)
    check(targets.get("cpu").run(parse(PROGRAMS[name]), "main", args, DiagnosticEngine()), expected)


@pytest.mark.parametrize("name", PROGRAMS)
def test_runs_as_cuda_c_on_the_cpu_harness(name):
    from fusecc.runtime.cuda.execute import run_on_cpu

    try:
        from fusecc.driver.cuda_target import compile_program
    except ImportError:
        from fusecc.driver.cuda_level import compile_program

    module = parse(PROGRAMS[name])
    args = inputs(module)
    source, manifest = compile_program(parse(PROGRAMS[name]), "main", "sm_90", PassContext(target="h200"))
    got = run_on_cpu(manifest, source, args)
    check([got[spec.name] for spec in manifest.outputs], evaluate(module, "main", args))


def test_an_empty_buffer_is_not_declared_dereferenceable():
    # LLVM rejects dereferenceable(0): the attribute is left off an empty buffer (16.F)
    from fusecc.passes.backends.llvm.emit import emit_llvm

    module = parse(PROGRAMS["empty_tensors"])
    run_pipeline(parse_pipeline(pipeline_for_level("loop", target="cpu")), module, PassContext(target="cpu"))
    text = emit_llvm(module).text
    assert "dereferenceable(0)" not in text
    assert "dereferenceable(" in text  # the non-empty buffers keep it


def test_a_shared_constant_bias_leaves_two_matmul_parts_in_a_horizontal_group():
    # the lowering splits a horizontal group by the parts fusion formed (tiling.parts):
    # a constant both matmuls read does not join them into one part (16.E)
    from fusecc.dialects.fusion import GroupOp
    from fusecc.passes.lowering.horizontal import components

    module = parse(PROGRAMS["shared_splat_bias"])
    run_pipeline(parse_pipeline("fuse"), module, PassContext(target="cpu"))
    (group,) = [op for op in module.walk() if isinstance(op, GroupOp)]
    assert group.attr("kind") == "horizontal"
    parts = components(group)
    assert [c.kind() for c in parts] == ["matmul", "matmul"]
    assert all(sum(op.name == "tensor.constant" for op in c.ops) == 1 for c in parts)
