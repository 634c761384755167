"""docs/legalize.md's rules on the CUDA backend: the generated CUDA C, run on
the CPU harness, gives what the loop interpreter gives, bit for bit, for
integer division and remainder by 0 and -1, float -> int of NaN, ±inf and
out-of-range values, selects and max/min over NaN and -0.0, i1 arithmetic
and f16/bf16 chains; and tensor programs on narrow floats round each op's
result as the reference does (issue 16, bug B)."""

from __future__ import annotations

import numpy as np
import pytest

from fusecc.compiler import parse_module, verify
from fusecc.driver.cuda_level import build_manifest
from fusecc.driver.cuda_target import compile_program
from fusecc.passes.backends.cuda.emit import emit_cuda
from fusecc.runtime.cuda.execute import run_on_cpu
from fusecc.runtime.loop_interpreter import run_schedule
from fusecc.runtime.reference import evaluate, round_bf16

INT32_MIN, INT64_MIN = -(2**31), -(2**63)


def gpu_program(name: str, inputs: dict[str, str], outputs: dict[str, str], body: str, n: int = 8) -> str:
    """One GPU kernel over `n` threads and its schedule; `body` reads `%x = loop.load %a, %t` etc."""
    args = {**inputs, **outputs}
    params = ", ".join(f"%{k}: memref<{n}x{t}>" for k, t in args.items())
    operands = ", ".join(f"%{k}" for k in args)
    types = ", ".join(f"memref<{n}x{t}>" for t in args.values())
    return f"""
loop.kernel @{name} {{group = 0, kind = "elementwise"}} {{
^bb0({params}):
  loop.parallel {{upper = [1], mapping = ["block.x"]}} {{
  ^bb0(%blk: index):
    loop.parallel {{upper = [{n}], mapping = ["thread.x"]}} {{
    ^bb0(%t: index):
{body}
      loop.yield
    }}
    loop.yield
  }}
  loop.return
}}
loop.schedule @main {{arena_size = 0, inputs = [{", ".join(f'"{k}"' for k in inputs)}], outputs = [{", ".join(f'"{k}"' for k in outputs)}]}} {{
^bb0({params}):
  loop.launch @{name}({operands}) : {types}
  loop.return
}}
"""


def run_both(text: str, inputs: list[np.ndarray], cache_dir):
    """(loop interpreter, CPU harness) outputs of a loop-level program; the
    interpreter runs it as written, the harness the emitted (legalized) C."""
    module = parse_module(text, "rule.ir")
    verify(module)
    expected = run_schedule(parse_module(text, "rule.ir"), "main", inputs)
    cuda = emit_cuda(module, "rule.ir")
    got = run_on_cpu(build_manifest(module, cuda, "rule.cu"), cuda.text, inputs, cache_dir=cache_dir)
    schedule = [op for op in module.body if op.name == "loop.schedule"][0]
    return expected, [got[name] for name in schedule.outputs], cuda.text


def assert_same_bits(expected, got):
    for want, have in zip(expected, got, strict=True):
        assert have.dtype == want.dtype and have.shape == want.shape
        np.testing.assert_array_equal(have.view(f"u{have.itemsize}"), want.view(f"u{want.itemsize}"))


def test_integer_division_and_remainder_by_zero_and_minus_one(cuda_cache_dir):
    body = """
      %a = loop.load %x, %t : (memref<8xi32>, index) -> i32
      %b = loop.load %y, %t : (memref<8xi32>, index) -> i32
      %q = arith.div %a, %b : (i32, i32) -> i32
      %r = arith.rem %a, %b : (i32, i32) -> i32
      loop.store %q, %quotient, %t : i32, memref<8xi32>, index
      loop.store %r, %remainder, %t : i32, memref<8xi32>, index
      %a64 = loop.load %x64, %t : (memref<8xi64>, index) -> i64
      %b64 = loop.load %y64, %t : (memref<8xi64>, index) -> i64
      %q64 = arith.div %a64, %b64 : (i64, i64) -> i64
      %r64 = arith.rem %a64, %b64 : (i64, i64) -> i64
      loop.store %q64, %quotient64, %t : i64, memref<8xi64>, index
      loop.store %r64, %remainder64, %t : i64, memref<8xi64>, index"""
    text = gpu_program("divide", {"x": "i32", "y": "i32", "x64": "i64", "y64": "i64"},
                       {"quotient": "i32", "remainder": "i32", "quotient64": "i64", "remainder64": "i64"}, body)
    x = np.array([7, -7, INT32_MIN, INT32_MIN, 5, -5, 0, 9], np.int32)
    y = np.array([0, 0, -1, 2, -1, -1, 0, -4], np.int32)
    x64 = np.array([7, -7, INT64_MIN, INT64_MIN, 5, -5, 0, 9], np.int64)
    expected, got, _ = run_both(text, [x, y, x64, y.astype(np.int64)], cuda_cache_dir)
    assert_same_bits(expected, got)
    np.testing.assert_array_equal(got[0], [0, 0, INT32_MIN, -(2**30), -5, 5, 0, -2])  # docs/legalize.md rule 3
    np.testing.assert_array_equal(got[1], [0, 0, 0, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(got[2][:3], [0, 0, INT64_MIN])


def test_float_to_int_saturates_and_nan_is_zero(cuda_cache_dir):
    body = """
      %v = loop.load %x, %t : (memref<8xf32>, index) -> f32
      %i = arith.cast %v : (f32) -> i32
      %l = arith.cast %v : (f32) -> i64
      %s = arith.cast %v : (f32) -> i8
      %h = arith.cast %v : (f32) -> bf16
      %hi = arith.cast %h : (bf16) -> i32
      loop.store %i, %as_i32, %t : i32, memref<8xi32>, index
      loop.store %l, %as_i64, %t : i64, memref<8xi64>, index
      loop.store %s, %as_i8, %t : i8, memref<8xi8>, index
      loop.store %hi, %via_bf16, %t : i32, memref<8xi32>, index"""
    text = gpu_program("to_int", {"x": "f32"}, {"as_i32": "i32", "as_i64": "i64", "as_i8": "i8", "via_bf16": "i32"}, body)
    x = np.array([np.inf, -np.inf, np.nan, 3e9, -3e9, 2.7, -2.7, 300.0], np.float32)
    expected, got, _ = run_both(text, [x], cuda_cache_dir)
    assert_same_bits(expected, got)
    np.testing.assert_array_equal(got[0], [2**31 - 1, INT32_MIN, 0, 2**31 - 1, INT32_MIN, 2, -2, 300])  # rule 4
    np.testing.assert_array_equal(got[2], [127, -128, 0, 127, -128, 2, -2, 127])


def test_select_max_and_min_keep_nan_payloads_and_signed_zeros(cuda_cache_dir):
    body = """
      %a = loop.load %x, %t : (memref<8xf32>, index) -> f32
      %b = loop.load %y, %t : (memref<8xf32>, index) -> f32
      %lt = arith.cmp %a, %b {predicate = "lt"} : (f32, f32) -> i1
      %ne = arith.cmp %a, %a {predicate = "ne"} : (f32, f32) -> i1
      %s = arith.select %lt, %a, %b : (i1, f32, f32) -> f32
      %n = arith.select %ne, %a, %b : (i1, f32, f32) -> f32
      %m = arith.max %a, %b : (f32, f32) -> f32
      %k = arith.min %a, %b : (f32, f32) -> f32
      loop.store %s, %selected, %t : f32, memref<8xf32>, index
      loop.store %n, %nan_chosen, %t : f32, memref<8xf32>, index
      loop.store %m, %larger, %t : f32, memref<8xf32>, index
      loop.store %k, %smaller, %t : f32, memref<8xf32>, index"""
    text = gpu_program("nan_select", {"x": "f32", "y": "f32"}, {"selected": "f32", "nan_chosen": "f32", "larger": "f32", "smaller": "f32"}, body)
    payloads = np.array([0x7FC01234, 0xFFC00001, 0x7F800001], np.uint32).view(np.float32)  # quiet NaNs and a signalling one
    x = np.array([payloads[0], 1.0, payloads[1], -0.0, 2.0, payloads[2], -1.0, np.inf], np.float32)
    y = np.array([1.0, payloads[0], -0.0, 0.0, payloads[1], 3.0, -np.inf, -0.0], np.float32)
    expected, got, _ = run_both(text, [x, y], cuda_cache_dir)
    assert_same_bits(expected[:2], got[:2])  # selects: bit for bit
    for want, have in zip(expected[2:], got[2:], strict=True):  # fmaxf/fminf: NaN ignored; either zero of ±0
        np.testing.assert_array_equal(np.isnan(have), np.isnan(want))
        np.testing.assert_array_equal(have[~np.isnan(have)], want[~np.isnan(want)])
    assert got[1].view(np.uint32)[0] == 0x7FC01234


def test_i1_arithmetic_is_logic(cuda_cache_dir):
    ops = ["add", "sub", "mul", "div", "rem", "max", "min", "and", "or", "xor"]
    lines = ["      %p = loop.load %a, %t : (memref<8xi1>, index) -> i1", "      %q = loop.load %b, %t : (memref<8xi1>, index) -> i1"]
    for op in ops:
        lines.append(f"      %{op}_v = arith.{op} %p, %q : (i1, i1) -> i1")
        lines.append(f"      loop.store %{op}_v, %{op}_out, %t : i1, memref<8xi1>, index")
    text = gpu_program("logic", {"a": "i1", "b": "i1"}, {f"{op}_out": "i1" for op in ops}, "\n".join(lines))
    a = np.array([0, 0, 1, 1, 0, 1, 1, 0], bool)
    b = np.array([0, 1, 0, 1, 1, 1, 0, 0], bool)
    expected, got, _ = run_both(text, [a, b], cuda_cache_dir)
    assert_same_bits(expected, got)
    np.testing.assert_array_equal(got[ops.index("add")], a | b)
    np.testing.assert_array_equal(got[ops.index("sub")], a ^ b)


def test_bf16_chains_round_after_each_op(cuda_cache_dir):
    body = """
      %v = loop.load %x, %t : (memref<8xbf16>, index) -> bf16
      %c = arith.constant {value = 0.001953125 : bf16} : () -> bf16
      %y = arith.add %v, %c : (bf16, bf16) -> bf16
      %z = arith.sub %y, %v : (bf16, bf16) -> bf16
      %e = math.exp %v : (bf16) -> bf16
      %w = arith.cast %e : (bf16) -> f32
      loop.store %z, %difference, %t : bf16, memref<8xbf16>, index
      loop.store %w, %exponential, %t : f32, memref<8xf32>, index"""
    text = gpu_program("bf16_chain", {"x": "bf16"}, {"difference": "bf16", "exponential": "f32"}, body)
    x = round_bf16(np.array([1.0, 1.1171875, 2.0, -1.0, 0.5, 3.0, 100.0, -0.25], np.float32))
    expected, got, source = run_both(text, [x], cuda_cache_dir)
    assert_same_bits(expected, got)
    assert float(got[0][0]) == 0.0  # 1 + 2^-9 rounds to 1 in bf16: (x + 2^-9) - x is 0, not 0.00195
    assert got[1][1] == np.float32(3.0625)  # exp(1.1171875) = 3.0562..., rounded to bf16 before the cast to f32
    assert "fusecc_round_bf16" in source


BF16_PROGRAM = """
func.func @main(%x: tensor<8xbf16>) -> (tensor<8xbf16>, tensor<8xf32>) {
  %c = tensor.constant {value = dense<0.001953125> : tensor<8xbf16>} : () -> tensor<8xbf16>
  %y = tensor.add %x, %c : (tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  %z = tensor.sub %y, %x : (tensor<8xbf16>, tensor<8xbf16>) -> tensor<8xbf16>
  %e = tensor.exp %x : (tensor<8xbf16>) -> tensor<8xbf16>
  %w = tensor.cast %e : (tensor<8xbf16>) -> tensor<8xf32>
  func.return %z, %w : tensor<8xbf16>, tensor<8xf32>
}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_fused_bf16_ops_round_like_the_reference(arch, cuda_cache_dir):
    """Issue 16, bug B on CUDA: the ops above fuse into one kernel, and each
    bf16 result is still rounded before its consumer sees it."""
    module = parse_module(BF16_PROGRAM, "bf16.ir")
    verify(module)
    x = round_bf16(np.array([1.0, 1.1171875, 2.0, -1.0, 0.5, 3.0, 100.0, -0.25], np.float32))
    want = evaluate(parse_module(BF16_PROGRAM, "bf16.ir"), "main", [x])
    source, manifest = compile_program(module, "main", arch)
    got = run_on_cpu(manifest, source, [x], cache_dir=cuda_cache_dir)
    z, w = (got[spec.name] for spec in manifest.outputs)
    assert float(z[0]) == 0.0 and w[1] == np.float32(3.0625)
    np.testing.assert_array_equal(z.astype(np.float32), np.asarray(want[0], np.float32))
    np.testing.assert_allclose(w, np.asarray(want[1], np.float32), rtol=2**-8)
