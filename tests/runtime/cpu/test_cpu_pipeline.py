"""The whole chain on the CPU: tensor programs through fusion and lowering to
loops, compiled by the CPU backend. The compiled module gives the loop
interpreter's numbers for that same module (within the tolerance policy),
and the program gives the reference interpreter's numbers (up to summation
order)."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from fusecc.compiler import parse_module, verify
from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.compiler.pass_manager import PassContext, run_pipeline
from fusecc.runtime.cpu import compile_program
from fusecc.driver.cpu_target import CpuTarget, loop_pipeline
from fusecc.runtime.loop_interpreter import run_schedule
from fusecc.driver.measure import PROGRAM_RTOL
from fusecc.driver.inputs import random_input_with_shrunk_weights
from fusecc.runtime.reference import evaluate

from cpu_tolerance import assert_kernel_close

EXAMPLES = sorted((pathlib.Path(__file__).parents[3] / "examples").glob("*.ir"))


def scaled_inputs(func, rng):
    """Random inputs, weights scaled as initialised (`random_input_with_shrunk_weights`)."""
    return [random_input_with_shrunk_weights(t, rng) for t in func.function_type.inputs]


def lower(text: str):
    module = parse_module(text)
    verify(module)
    run_pipeline(loop_pipeline(), module, PassContext(target="cpu"))
    return module


def assert_close_to(got, want, rtol):
    scale = max(float(np.max(np.abs(want))), 1e-30)
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=0, atol=rtol * scale)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_on_the_cpu_matches_the_reference(path):
    text = path.read_text()
    module = parse_module(text)
    verify(module)
    func = module.lookup("main") or module.functions()[0]
    inputs = scaled_inputs(func, np.random.default_rng(3))
    want = evaluate(module, func.sym_name, inputs)
    got = CpuTarget().run(parse_module(text), func.sym_name, inputs, DiagnosticEngine())
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        assert_close_to(g, w, PROGRAM_RTOL)


T = "tensor<{}xf32>".format
PROGRAMS = {
    "broadcast_chain": f"""
func.func @main(%x: {T('3x5x37')}, %s: {T('5x1')}, %b: {T('37')}) -> {T('3x5x37')} {{
  %m = tensor.mul %x, %s : ({T('3x5x37')}, {T('5x1')}) -> {T('3x5x37')}
  %g = tensor.sigmoid %m : ({T('3x5x37')}) -> {T('3x5x37')}
  %y = tensor.add %g, %b : ({T('3x5x37')}, {T('37')}) -> {T('3x5x37')}
  func.return %y : {T('3x5x37')}
}}""",
    "reductions": f"""
func.func @main(%x: {T('6x40')}) -> ({T('6x1')}, {T('40')}) {{
  %e = tensor.exp %x : ({T('6x40')}) -> {T('6x40')}
  %s = tensor.reduce_sum %e {{axes = [1], keepdims = true}} : ({T('6x40')}) -> {T('6x1')}
  %m = tensor.reduce_max %x {{axes = [0]}} : ({T('6x40')}) -> {T('40')}
  func.return %s, %m : {T('6x1')}, {T('40')}
}}""",
    "softmax_layernorm": f"""
func.func @main(%x: {T('5x48')}, %g: {T('48')}, %b: {T('48')}) -> {T('5x48')} {{
  %n = tensor.layernorm %x, %g, %b : ({T('5x48')}, {T('48')}, {T('48')}) -> {T('5x48')}
  %p = tensor.softmax %n : ({T('5x48')}) -> {T('5x48')}
  func.return %p : {T('5x48')}
}}""",
    "matmul_gelu": f"""
func.func @main(%a: {T('16x24')}, %w: {T('40x24')}, %b: {T('40')}) -> {T('16x40')} {{
  %m = tensor.matmul %a, %w {{transpose_b = true}} : ({T('16x24')}, {T('40x24')}) -> {T('16x40')}
  %s = tensor.add %m, %b : ({T('16x40')}, {T('40')}) -> {T('16x40')}
  %y = tensor.gelu %s : ({T('16x40')}) -> {T('16x40')}
  func.return %y : {T('16x40')}
}}""",
    "attention_causal": f"""
func.func @main(%q: {T('1x2x20x16')}, %k: {T('1x2x20x16')}, %v: {T('1x2x20x16')}) -> {T('1x2x20x16')} {{
  %o = tensor.attention %q, %k, %v {{causal = true}} : ({T('1x2x20x16')}, {T('1x2x20x16')}, {T('1x2x20x16')}) -> {T('1x2x20x16')}
  func.return %o : {T('1x2x20x16')}
}}""",
    "layout_and_narrow_types": f"""
func.func @main(%x: {T('4x6x8')}, %h: tensor<8x24xf16>) -> (tensor<8x24xbf16>, {T('6x8')}) {{
  %t = tensor.transpose %x {{perm = [2, 0, 1]}} : ({T('4x6x8')}) -> {T('8x4x6')}
  %r = tensor.reshape %t : ({T('8x4x6')}) -> {T('8x24')}
  %hf = tensor.cast %h : (tensor<8x24xf16>) -> {T('8x24')}
  %s = tensor.mul %r, %hf : ({T('8x24')}, {T('8x24')}) -> {T('8x24')}
  %o = tensor.cast %s : ({T('8x24')}) -> tensor<8x24xbf16>
  %sl = tensor.slice %x {{start = [1, 0, 0], stop = [2, 6, 8], step = [1, 1, 1]}} : ({T('4x6x8')}) -> {T('1x6x8')}
  %q = tensor.reshape %sl : ({T('1x6x8')}) -> {T('6x8')}
  func.return %o, %q : tensor<8x24xbf16>, {T('6x8')}
}}""",
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_lowered_program_matches_the_loop_interpreter_and_the_reference(name):
    text = PROGRAMS[name]
    reference_module = parse_module(text)
    verify(reference_module)
    func = reference_module.functions()[0]
    inputs = scaled_inputs(func, np.random.default_rng(11))
    module = lower(text)
    got = compile_program(module).run(inputs, func.sym_name)
    interpreted = run_schedule(module, func.sym_name, inputs)
    reference = evaluate(reference_module, func.sym_name, inputs)
    for g, i, r in zip(got, interpreted, reference, strict=True):
        assert_kernel_close(g, i)
        assert_close_to(g, r, 1e-5 if g.dtype == np.float32 and name != "layout_and_narrow_types" else 1e-2)
