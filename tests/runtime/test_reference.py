"""The reference interpreter against hand-written numpy, op by op:
broadcasting edge cases, negative axes, keepdims, i1 and rank-0 tensors,
f16/bf16 storage, and erf against math.erf."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.parser import parse_module
from fusecc.compiler.types import FunctionType, TensorType, bf16, f16, f32, i1, i32, i64, round_to_bf16
from fusecc.compiler.verifier import verify
from fusecc.dialects import tensor as T
from fusecc.dialects.builtin import ModuleOp
from fusecc.dialects.func import FuncOp, ReturnOp
from fusecc.compiler.diagnostics import DiagnosticError, InternalCompilerError
from fusecc.runtime.reference import InterpreterError, erf, evaluate

ELEMENTS = {np.dtype(np.float32): f32, np.dtype(np.float16): f16, np.dtype(np.bool_): i1, np.dtype(np.int32): i32, np.dtype(np.int64): i64}
rng = np.random.default_rng(1234)


def run(op_class, *inputs, attrs=None, result_type=None, elements=None):
    """Evaluate one op on `inputs` through a function built with the builder."""
    elements = elements or [ELEMENTS[np.asarray(x).dtype] for x in inputs]
    types = [TensorType(np.shape(x), e) for x, e in zip(inputs, elements)]
    module = ModuleOp.build()
    func = FuncOp.build("f", FunctionType(types, ()))
    module.body.append(func)
    b = Builder(InsertionPoint.at_end(func.body))
    op = b.create(op_class, list(func.arguments), attrs, None if result_type is None else [result_type])
    b.create(ReturnOp, op.results)
    func.attributes["function_type"] = A.TypeAttr(FunctionType(types, op.result_types))
    verify(module)
    (out,) = evaluate(module, "f", list(inputs))
    assert out.shape == tuple(op.result.type.shape)
    assert out.dtype == op.result.type.element_type.numpy_dtype
    return out


def normal(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# --------------------------------------------------------------------------- elementwise


def np_erf(x):
    return np.vectorize(math.erf)(x.astype(np.float64))


UNARY_CASES = [
    (T.NegOp, lambda x: -x),
    (T.AbsOp, np.abs),
    (T.ExpOp, np.exp),
    (T.LogOp, lambda x: np.log(np.abs(x) + 0.1), "positive"),
    (T.SqrtOp, lambda x: np.sqrt(np.abs(x) + 0.1), "positive"),
    (T.RsqrtOp, lambda x: 1 / np.sqrt(np.abs(x) + 0.1), "positive"),
    (T.TanhOp, np.tanh),
    (T.ErfOp, np_erf),
    (T.ReciprocalOp, lambda x: 1 / x),
    (T.ReluOp, lambda x: np.where(x > 0, x, 0)),
    (T.SigmoidOp, lambda x: 1 / (1 + np.exp(-x))),
    (T.SiluOp, lambda x: x / (1 + np.exp(-x))),
]


@pytest.mark.parametrize("case", UNARY_CASES, ids=lambda c: c[0].name)
def test_unary_float_ops(case):
    op_class, reference = case[0], case[1]
    x = normal(3, 5) * 3
    if len(case) > 2:
        x = np.abs(x) + np.float32(0.1)
        expected = {T.LogOp: np.log, T.SqrtOp: np.sqrt, T.RsqrtOp: lambda v: 1 / np.sqrt(v)}[op_class](x.astype(np.float64))
    else:
        expected = reference(x.astype(np.float64))
    np.testing.assert_allclose(run(op_class, x), expected, rtol=2e-6, atol=1e-7)


def test_gelu_exact_and_tanh():
    x = np.linspace(-6, 6, 97, dtype=np.float32)
    x64 = x.astype(np.float64)
    exact = 0.5 * x64 * (1 + np_erf(x64 / math.sqrt(2)))
    tanh = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)))
    # Computed in float32 as the spec says: 1 + erf (or tanh) cancels for x << 0.
    np.testing.assert_allclose(run(T.GeluOp, x), exact, rtol=1e-6, atol=5e-7)
    np.testing.assert_allclose(run(T.GeluOp, x, attrs={"approximate": "tanh"}), tanh, rtol=1e-6, atol=5e-7)
    assert not np.allclose(exact, tanh, rtol=0, atol=1e-6)  # the two forms differ measurably


def test_erf_accuracy_against_math_erf():
    x = np.concatenate([np.linspace(-7, 7, 2001), [0.0, 1e-8, -1e-8, 2.4999, 2.5, 2.5001, 30.0, -30.0]])
    expected = np_erf(x)
    assert np.max(np.abs(erf(x) - expected)) < 1e-13
    x32 = x.astype(np.float32)
    got = run(T.ErfOp, x32)
    assert np.max(np.abs(got - np_erf(x32))) <= 6e-8  # correctly rounded to float32, within half an ulp of 1
    assert np.all(np.abs(got) <= 1)


def test_integer_unary_ops():
    x = np.array([-3, 0, 5], np.int32)
    np.testing.assert_array_equal(run(T.NegOp, x), [3, 0, -5])
    np.testing.assert_array_equal(run(T.AbsOp, x), [3, 0, 5])
    np.testing.assert_array_equal(run(T.ReluOp, x), [0, 0, 5])


@pytest.mark.parametrize(
    "lhs_shape, rhs_shape",
    [((4, 1, 3), (5, 1)), ((), (2, 3)), ((2, 3), ()), ((), ()), ((0, 3), (1, 3)), ((3, 1), (1, 4)), ((1,), (6,))],
)
@pytest.mark.parametrize(
    "op_class, reference",
    [(T.AddOp, np.add), (T.SubOp, np.subtract), (T.MulOp, np.multiply), (T.DivOp, np.divide), (T.MaxOp, np.maximum), (T.MinOp, np.minimum)],
    ids=lambda v: getattr(v, "name", ""),
)
def test_binary_ops_broadcast_like_numpy(op_class, reference, lhs_shape, rhs_shape):
    a, b = normal(*lhs_shape), normal(*rhs_shape) + np.float32(0.5)
    np.testing.assert_allclose(run(op_class, a, b), reference(a, b), rtol=1e-6)


def test_pow_float_and_integer():
    a, b = np.abs(normal(4)) + 0.5, normal(4)
    np.testing.assert_allclose(run(T.PowOp, a, b), a.astype(np.float64) ** b, rtol=2e-6)
    ints = np.array([2, -2, 3, 1, -1, -1, 2], np.int64)
    powers = np.array([3, 3, 0, -4, -3, -2, -1], np.int64)
    np.testing.assert_array_equal(run(T.PowOp, ints, powers), [8, -8, 1, 1, -1, 1, 0])


def test_integer_division_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 6, 5], np.int32)
    b = np.array([2, 2, -2, -2, 3, 0], np.int32)
    np.testing.assert_array_equal(run(T.DivOp, a, b), [3, -3, -3, 3, 2, 0])


def test_max_min_on_booleans():
    a, b = np.array([True, False, True]), np.array([[False], [True]])
    np.testing.assert_array_equal(run(T.MaxOp, a, b), np.maximum(a, b))
    np.testing.assert_array_equal(run(T.MinOp, a, b), np.minimum(a, b))


@pytest.mark.parametrize("predicate, reference", [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal)])
def test_cmp_predicates_broadcast_to_booleans(predicate, reference):
    a = np.array([[1, 2, 3]], np.float32)
    b = np.array([[2], [3]], np.float32)
    out = run(T.CmpOp, a, b, attrs={"predicate": predicate})
    np.testing.assert_array_equal(out, reference(a, b))
    bools = np.array([True, False])
    np.testing.assert_array_equal(run(T.CmpOp, bools, bools[::-1].copy(), attrs={"predicate": predicate}), reference(bools, bools[::-1]))


def test_select_broadcasts_all_three_operands():
    cond = np.array([[True], [False]])
    a, b = normal(2, 3), normal(3)
    np.testing.assert_array_equal(run(T.SelectOp, cond, a, b), np.where(cond, a, b))
    scalar_cond = np.array(True)
    np.testing.assert_array_equal(run(T.SelectOp, scalar_cond, a, b), a)


@pytest.mark.parametrize(
    "values, source, target, expected",
    [
        ([1.7, -1.7, 0.0], f32, i32, [1, -1, 0]),
        ([1.5, 0.0, -0.0], f32, i1, [True, False, False]),
        ([True, False], i1, f32, [1.0, 0.0]),
        ([300, -2], i32, f32, [300.0, -2.0]),
        ([1.00390625, 65520.0], f32, f16, [np.float16(1.00390625), np.float16(np.inf)]),
        ([1.00390625, 1.01171875], f32, bf16, [1.0, 1.015625]),
    ],
)
def test_cast(values, source, target, expected):
    x = np.array(values, source.numpy_dtype)
    out = run(T.CastOp, x, result_type=TensorType(x.shape, target), elements=[source])
    np.testing.assert_array_equal(out, np.array(expected, target.numpy_dtype))


# --------------------------------------------------------------------------- reductions


@pytest.mark.parametrize(
    "op_class, reference",
    [(T.ReduceSumOp, np.sum), (T.ReduceMaxOp, np.max), (T.ReduceMinOp, np.min), (T.ReduceMeanOp, np.mean)],
    ids=lambda v: getattr(v, "name", ""),
)
@pytest.mark.parametrize("axes", [None, [0], [-1], [-1, 0], [1, -3]], ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(op_class, reference, axes, keepdims):
    x = normal(2, 3, 4)
    attrs = {"keepdims": keepdims}
    if axes is not None:
        attrs["axes"] = axes
    expected = reference(x.astype(np.float64), axis=None if axes is None else tuple(axes), keepdims=keepdims)
    np.testing.assert_allclose(run(op_class, x, attrs=attrs), expected, rtol=2e-6, atol=1e-6)


def test_reductions_of_integers_booleans_and_scalars():
    ints = np.arange(12, dtype=np.int32).reshape(3, 4)
    np.testing.assert_array_equal(run(T.ReduceSumOp, ints, attrs={"axes": [-1]}), [6, 22, 38])
    bools = np.array([[True, False], [False, False]])
    np.testing.assert_array_equal(run(T.ReduceMaxOp, bools, attrs={"axes": [1], "keepdims": True}), [[True], [False]])
    np.testing.assert_array_equal(run(T.ReduceMinOp, bools), np.array(False))
    scalar = np.array(2.5, np.float32)
    assert run(T.ReduceSumOp, scalar) == np.float32(2.5)
    assert run(T.ReduceSumOp, normal(3), attrs={"axes": []}).shape == (3,)


# --------------------------------------------------------------------------- composites


def np_softmax(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [None, 0, 1, -2])
def test_softmax(axis):
    x = normal(3, 4, 5) * 4
    x[0, 0, :] = -np.inf
    x[0, 0, 0] = 0.0
    attrs = {} if axis is None else {"axis": axis}
    np.testing.assert_allclose(run(T.SoftmaxOp, x, attrs=attrs), np_softmax(x, -1 if axis is None else axis), rtol=2e-6, atol=1e-7)


def test_layernorm_and_rmsnorm():
    x, gamma, beta = normal(2, 3, 16) * 3 + 1, normal(16), normal(1, 16)
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(-1, keepdims=True)
    expected = (x64 - mean) / np.sqrt(var + 1e-5) * gamma + beta
    np.testing.assert_allclose(run(T.LayerNormOp, x, gamma, beta), expected, rtol=1e-5, atol=1e-5)
    expected = (x64 - mean) / np.sqrt(var + 0.5) * gamma + beta
    np.testing.assert_allclose(run(T.LayerNormOp, x, gamma, beta, attrs={"epsilon": 0.5}), expected, rtol=1e-5, atol=1e-5)
    rms = x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-6) * gamma
    np.testing.assert_allclose(run(T.RmsNormOp, x, gamma), rms, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "a_shape, b_shape, flags",
    [
        ((3, 4), (4, 5), {}),
        ((2, 3, 4), (4, 5), {}),
        ((2, 1, 3, 4), (5, 4, 6), {}),
        ((4,), (4, 5), {}),
        ((3, 4), (4,), {}),
        ((4,), (4,), {}),
        ((4, 3), (4, 5), {"transpose_a": True}),
        ((2, 3, 4), (2, 5, 4), {"transpose_b": True}),
        ((4, 3), (5, 4), {"transpose_a": True, "transpose_b": True}),
    ],
)
def test_matmul(a_shape, b_shape, flags):
    a, b = normal(*a_shape), normal(*b_shape)
    a_ref = np.swapaxes(a, -1, -2) if flags.get("transpose_a") else a
    b_ref = np.swapaxes(b, -1, -2) if flags.get("transpose_b") else b
    np.testing.assert_allclose(run(T.MatmulOp, a, b, attrs=flags), np.matmul(a_ref.astype(np.float64), b_ref), rtol=1e-5, atol=1e-5)


def test_integer_matmul():
    a, b = np.arange(6, dtype=np.int64).reshape(2, 3), np.arange(3, dtype=np.int64)
    np.testing.assert_array_equal(run(T.MatmulOp, a, b), [5, 14])


def np_attention(q, k, v, mask=None, scale=None, causal=False):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if mask is not None:
        scores = scores + mask
    if causal:
        s, t = scores.shape[-2:]
        scores = np.where(np.arange(t)[None, :] > np.arange(s)[:, None], -np.inf, scores)
    return np_softmax(scores, -1) @ v


def test_attention_variants():
    q, k, v = normal(2, 3, 5, 8), normal(2, 3, 7, 8), normal(2, 3, 7, 4)
    np.testing.assert_allclose(run(T.AttentionOp, q, k, v), np_attention(q, k, v), rtol=1e-5, atol=1e-6)
    mask = normal(1, 1, 7)
    np.testing.assert_allclose(run(T.AttentionOp, q, k, v, mask), np_attention(q, k, v, mask), rtol=1e-5, atol=1e-6)
    got = run(T.AttentionOp, q, k, v, attrs={"scale": 0.5, "causal": True})
    np.testing.assert_allclose(got, np_attention(q, k, v, scale=0.5, causal=True), rtol=1e-5, atol=1e-6)
    square = normal(4, 6, 8)
    got = run(T.AttentionOp, square, square, square, attrs={"causal": True})
    np.testing.assert_allclose(got, np_attention(square, square, square, causal=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[:, 0], square[:, 0], rtol=1e-6)  # the first query sees only itself


# --------------------------------------------------------------------------- layout


def test_layout_ops():
    x = normal(2, 3, 4)
    np.testing.assert_array_equal(run(T.ReshapeOp, x, result_type=TensorType((4, 6), f32)), x.reshape(4, 6))
    np.testing.assert_array_equal(run(T.ReshapeOp, np.ones((1, 1), np.float32), result_type=TensorType((), f32)), np.float32(1))
    np.testing.assert_array_equal(run(T.TransposeOp, x, attrs={"perm": [2, 0, 1]}), np.transpose(x, (2, 0, 1)))
    np.testing.assert_array_equal(run(T.BroadcastToOp, normal(3, 1), result_type=TensorType((2, 3, 5), f32)).shape, (2, 3, 5))
    y = normal(3, 1)
    np.testing.assert_array_equal(run(T.BroadcastToOp, y, result_type=TensorType((2, 3, 5), f32)), np.broadcast_to(y, (2, 3, 5)))


@pytest.mark.parametrize(
    "start, stop, step",
    [
        ([0, 1, 0], [2, 3, 4], None),
        ([-1, 0, 1], [2, 100, -1], [1, 2, 1]),
        ([1, 2, 3], [0, 0, 0], [-1, -1, -2]),
        ([0, 0, 0], [0, 3, 4], None),
        # negative steps whose stop runs past index 0 (slice.indices gives stop -1)
        ([1, 2, 3], [-3, -4, -5], [-1, -1, -1]),
        ([1, -1, 3], [-100, -100, -100], [-1, -2, -3]),
        ([5, 5, 5], [-3, -4, -5], [-2, -2, -2]),
    ],
)
def test_slice(start, stop, step):
    x = normal(2, 3, 4)
    attrs = {"start": start, "stop": stop} | ({"step": step} if step else {})
    index = tuple(slice(a, b, s) for a, b, s in zip(start, stop, step or [1, 1, 1]))
    np.testing.assert_array_equal(run(T.SliceOp, x, attrs=attrs), x[index])


def test_concat():
    a, b, c = normal(2, 3), normal(2, 1), normal(2, 2)
    np.testing.assert_array_equal(run(T.ConcatOp, a, b, c, attrs={"axis": -1}), np.concatenate([a, b, c], axis=-1))
    np.testing.assert_array_equal(run(T.ConcatOp, a, a), np.concatenate([a, a]))
    np.testing.assert_array_equal(run(T.ConcatOp, a), a)


# --------------------------------------------------------------------------- storage types


def test_f16_is_computed_in_f32_and_stored_in_f16():
    a, b = normal(64, dtype=np.float16), normal(64, dtype=np.float16)
    out = run(T.AddOp, a, b)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16))
    big = np.array([60000.0], np.float16)
    assert np.isinf(run(T.AddOp, big, big))[0]  # overflows f16 storage, not f32 compute
    mean = run(T.ReduceMeanOp, np.full(4096, 60000.0, np.float16))
    assert mean == np.float16(60000.0)  # no f16 overflow in the accumulation


def test_bf16_is_stored_rounded_in_float32():
    a = round_to_bf16(normal(32))
    b = round_to_bf16(normal(32))
    out = run(T.MulOp, a, b, elements=[bf16, bf16])
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, round_to_bf16(a * b))
    assert np.all((out.view(np.uint32) & 0xFFFF) == 0)


def test_bf16_inputs_are_rounded_on_entry():
    x = np.array([1.00390625], np.float32)  # between two bf16 values: a tie, rounds to even
    out = run(T.NegOp, x, elements=[bf16])
    assert out[0] == -1.0


# --------------------------------------------------------------------------- programs


def test_constants_calls_multiple_results_and_groups():
    module = parse_module(
        """\
func.func @pair(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %c = tensor.constant {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %0 = tensor.mul %x, %c : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return %0, %c : tensor<3xf32>, tensor<3xf32>
}
func.func @main(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<f32>) {
  %r:2 = func.call @pair(%x) : (tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>)
  %g = fusion.group %r#0, %r#1 {kind = "elementwise"} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32> {
  ^bb0(%a: tensor<3xf32>, %b: tensor<3xf32>):
    %s = tensor.sub %a, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    fusion.yield %s : tensor<3xf32>
  }
  %sum = tensor.reduce_sum %g : (tensor<3xf32>) -> tensor<f32>
  func.return %g, %sum : tensor<3xf32>, tensor<f32>
}
"""
    )
    verify(module)
    x = np.array([1.0, 1.0, 2.0], np.float32)
    g, total = evaluate(module, "main", [x])
    np.testing.assert_array_equal(g, x * [1, 2, 3] - [1, 2, 3])
    assert total.shape == () and total == np.float32(3.0)


def test_interpreter_errors():
    module = parse_module(
        """\
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  func.return %x : tensor<3xf32>
}
func.func @loop(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = func.call @loop(%x) : (tensor<3xf32>) -> tensor<3xf32>
  func.return %0 : tensor<3xf32>
}
"""
    )
    with pytest.raises(InterpreterError, match="takes 1 arguments, got 2"):
        evaluate(module, "f", [np.zeros(3), np.zeros(3)])
    with pytest.raises(InterpreterError, match=r"argument 0 of @f has shape \[4\]"):
        evaluate(module, "f", [np.zeros(4)])
    with pytest.raises(InterpreterError, match="no function @g"):
        evaluate(module, "g", [])
    with pytest.raises(InterpreterError, match="@loop calls itself"):
        evaluate(module, "loop", [np.zeros(3)])


# --------------------------------------------------------------------------- slices past index 0 (issue 16.A)


REVERSED_SLICE = """
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.slice %x {start = [3], stop = [-5], step = [-1]} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""


def test_negative_step_past_index_zero_is_the_whole_axis_reversed():
    x = np.arange(4, dtype=np.float32)
    (out,) = evaluate(parse_module(REVERSED_SLICE), "main", [x])
    np.testing.assert_array_equal(out, x[::-1])


@pytest.mark.parametrize("length", [1, 4, 7])
@pytest.mark.parametrize("step", [-1, -2, -3, 1, 3])
def test_every_slice_of_an_axis_agrees_with_python(length, step):
    x = np.arange(length, dtype=np.float32)
    for start in range(-length - 2, length + 2):
        for stop in range(-length - 2, length + 2):
            np.testing.assert_array_equal(run(T.SliceOp, x, attrs={"start": [start], "stop": [stop], "step": [step]}), x[start:stop:step])


# --------------------------------------------------------------------------- results against their declared types


def test_a_result_that_disagrees_with_its_type_is_an_internal_error(monkeypatch):
    """The reference checks shape, rank and dtype of every op's result; a
    mismatch names the op and is a compiler bug, never an output."""
    x = np.arange(4, dtype=np.float32)
    wrong = {
        "shape": lambda self, args: [args[0][:0]],
        "rank": lambda self, args: [args[0].reshape(2, 2)],
        "dtype": lambda self, args: [args[0].astype(np.float64)],
    }
    for what, evaluate_wrongly in wrong.items():
        monkeypatch.setattr(T.SliceOp, "evaluate", evaluate_wrongly)
        with pytest.raises(InternalCompilerError, match=rf"'tensor.slice'.*{what}") as caught:
            evaluate(parse_module(REVERSED_SLICE, "reversed.ir"), "main", [x])
        assert "reversed.ir:3:" in str(caught.value)


def test_a_result_type_mismatch_exits_with_2(tmp_path, monkeypatch, capsys):
    from fusecc.tools import fusecc as driver

    program = tmp_path / "reversed.ir"
    program.write_text(REVERSED_SLICE)
    monkeypatch.setattr(T.SliceOp, "evaluate", lambda self, args: [args[0][:0]])
    assert driver.main(["run", str(program), "--random-inputs", "--target", "reference"]) == 2
    err = capsys.readouterr().err
    assert "internal compiler error" in err and "tensor.slice" in err and "Traceback" not in err


def test_operands_outside_the_domain_are_a_located_error():
    text = """
func.func @main(%x: tensor<3x0xf32>) -> tensor<3xf32> {
  %0 = tensor.reduce_max %x {axes = [1]} : (tensor<3x0xf32>) -> tensor<3xf32>
  func.return %0 : tensor<3xf32>
}
"""
    with pytest.raises(DiagnosticError, match="reduce_max.*empty axis") as caught:
        evaluate(parse_module(text, "empty.ir"), "main", [np.zeros((3, 0), np.float32)])
    assert caught.value.diagnostic.location.file_line_col().line == 3


# --------------------------------------------------------------------------- pow's special cases (issue 16.G)


POW_CASES = [  # (base, exponent, C99 pow)
    (-np.inf, 0.5, np.inf),
    (-np.inf, 3.0, -np.inf),
    (-np.inf, -0.5, 0.0),
    (-0.0, 0.5, 0.0),
    (-8.0, 1 / 3, np.nan),
    (np.nan, 0.0, 1.0),
    (1.0, np.nan, 1.0),
    (-1.0, np.inf, 1.0),
    (3.0, 0.5, math.sqrt(3.0)),
    (2.0, -1.0, 0.5),
]


@pytest.mark.parametrize("exponent_shape", [(), (len(POW_CASES),)], ids=["scalar exponent", "array exponent"])
def test_pow_follows_c99_whatever_the_exponent_shape(exponent_shape):
    """numpy's float power takes a sqrt shortcut for a scalar exponent 0.5
    (pow(-inf, 0.5) = NaN, pow(-0.0, 0.5) = -0.0); the reference follows C99
    for every shape (docs/semantics.md)."""
    for i, (base, exponent, want) in enumerate(POW_CASES):
        a = np.full(len(POW_CASES), base, np.float32)
        b = np.full(exponent_shape, exponent, np.float32)
        got = run(T.PowOp, a, b)[i]
        want = np.float32(want)
        assert (np.isnan(got) and np.isnan(want)) or (got == want and np.signbit(got) == np.signbit(want)), (base, exponent, got)


# --------------------------------------------------------------------------- gather


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize("index_shape", [(), (5,), (2, 3)])
def test_gather_is_numpy_take_in_range(index_dtype, axis, index_shape):
    data = normal(3, 4, 5)
    length = data.shape[axis]
    indices = rng.integers(-length, length, size=index_shape).astype(index_dtype)
    out = run(T.GatherOp, data, indices, attrs={"axis": axis})
    np.testing.assert_array_equal(out, np.take(data, indices, axis=axis))
    assert out.shape == data.shape[: axis % 3] + index_shape + data.shape[axis % 3 + 1 :]


def test_gather_clamps_out_of_range_indices_after_wrapping():
    data = np.array([10, 11, 12, 13], np.int32)
    indices = np.array([-9, -5, -4, -1, 0, 3, 4, 100, np.iinfo(np.int64).max, np.iinfo(np.int64).min], np.int64)
    out = run(T.GatherOp, data, indices)
    np.testing.assert_array_equal(out, [10, 10, 10, 13, 10, 13, 13, 13, 13, 10])


def test_gather_of_no_indices_and_of_booleans():
    data = np.array([[True, False], [False, False]])
    np.testing.assert_array_equal(run(T.GatherOp, data, np.array([1, 0], np.int32), attrs={"axis": 1}), [[False, True], [False, False]])
    assert run(T.GatherOp, normal(3, 2), np.zeros((0,), np.int64)).shape == (0, 2)


# --------------------------------------------------------------------------- float -> int casts saturate


@pytest.mark.parametrize("element, dtype", [(i32, np.int32), (i64, np.int64)])
def test_float_to_int_cast_saturates(element, dtype):
    """docs/semantics.md (the loop level's rule too, docs/legalize.md rule 4):
    truncation toward zero, NaN gives 0, out of range gives the max or min."""
    info = np.iinfo(dtype)
    x = np.array([np.nan, np.inf, -np.inf, 1e19, -1e19, -2.7, 2.7, -0.0, 2.0**31], np.float32)
    want = [0, info.max, info.min, info.max, info.min, -2, 2, 0, info.max if dtype is np.int32 else 2**31]
    out = run(T.CastOp, x, result_type=TensorType(x.shape, element))
    np.testing.assert_array_equal(out, np.array(want, dtype))


def test_the_oracle_does_not_use_the_lowering():
    """The reference must stay independent of what it checks: importing it
    and running a program loads nothing of fusecc.passes."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from fusecc.compiler.parser import parse_module\n"
        "from fusecc.runtime.reference import evaluate\n"
        f"evaluate(parse_module({REVERSED_SLICE!r}), 'main', [np.zeros(4, np.float32)])\n"
        "print(sorted(m for m in sys.modules if m.startswith('fusecc.passes')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
