"""Types and typed attributes: interning, spelling, parsing, broadcasting."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from fusecc.compiler import attributes as A
from fusecc.compiler.parser import parse_module
from fusecc.compiler.printer import print_op
from fusecc.compiler.types import (
    FunctionType,
    MemRefType,
    TensorType,
    TypeSyntaxError,
    bf16,
    broadcast_shapes,
    f16,
    f32,
    f64,
    i1,
    i32,
    i64,
    parse_type_token,
    round_to_bf16,
)


def test_types_are_interned_and_printable():
    assert TensorType((4, 8), f32) is TensorType([4, 8], f32)
    assert TensorType((4, 8), f32) is not TensorType((4, 8), f16)
    assert str(TensorType((), f32)) == "tensor<f32>"
    assert str(TensorType((2, 3, 4), bf16)) == "tensor<2x3x4xbf16>"
    assert str(MemRefType((128, 64), f32, "shared")) == "memref<128x64xf32, shared>"
    assert str(MemRefType((8,), f32)) == "memref<8xf32>"
    ftype = FunctionType((TensorType((4,), f32),), (TensorType((4,), f32), TensorType((), i1)))
    assert str(ftype) == "(tensor<4xf32>) -> (tensor<4xf32>, tensor<i1>)"
    assert pickle.loads(pickle.dumps(ftype)) is ftype
    t = TensorType((4, 8), f16)
    assert t.rank == 2 and t.num_elements == 32 and t.byte_size == 64
    assert t.with_shape((8,)) is TensorType((8,), f16) and t.with_element_type(f32) is TensorType((4, 8), f32)
    assert TensorType((3,), i1).byte_size == 3 and TensorType((), f32).num_elements == 1


@pytest.mark.parametrize(
    "text",
    ["f32", "f16", "bf16", "f64", "i1", "i8", "i32", "i64", "index", "tensor<f32>", "tensor<1x2x3xi1>", "memref<4xf32, local>"],
)
def test_type_tokens_round_trip(text):
    assert str(parse_type_token(text)) == text


@pytest.mark.parametrize(
    "text, message",
    [
        ("tensor<4xf33>", "unknown element type 'f33'"),
        ("tensor<4x??xf32>", "malformed tensor type"),
        ("tensor<4xf32, shared>", "take no memory space"),
        ("memref<4xf32, texture>", "unknown memory space 'texture'"),
        ("vector<4xf32>", "unknown type"),
    ],
)
def test_bad_type_tokens(text, message):
    with pytest.raises(TypeSyntaxError, match=message):
        parse_type_token(text)


@pytest.mark.parametrize(
    "shapes, expected",
    [
        (((4, 8), (8,)), (4, 8)),
        (((4, 1), (1, 8)), (4, 8)),
        (((), (3, 2)), (3, 2)),
        (((2, 1, 5), (7, 1)), (2, 7, 5)),
        (((0, 3), (1, 3)), (0, 3)),
        (((4, 8), (4,)), None),
        (((2, 3), (3, 2)), None),
        ((), ()),
    ],
)
def test_broadcast_shapes_matches_numpy(shapes, expected):
    assert broadcast_shapes(*shapes) == expected
    if expected is not None:
        assert np.broadcast_shapes(*shapes) == expected


def test_round_to_bf16():
    x = np.array([1.0, 1.00390625, 1.0078125, 3.0e38, -0.0, np.inf, np.nan], np.float32)
    out = round_to_bf16(x)
    assert out.dtype == np.float32
    assert out[0] == 1.0 and out[1] == 1.0  # a tie rounds to even
    assert out[2] == 1.0078125 and np.isinf(out[5]) and np.isnan(out[6])
    assert np.all((out[:5].view(np.uint32) & 0xFFFF) == 0)


@pytest.mark.parametrize(
    "attr, text",
    [
        (A.IntegerAttr(3), "3"),
        (A.IntegerAttr(-1, i32), "-1 : i32"),
        (A.FloatAttr(1e-5), "1.0e-05"),
        (A.FloatAttr(2.0), "2.0"),
        (A.FloatAttr(0.5, f16), "0.5 : f16"),
        (A.FloatAttr(math.inf), "0x7F800000 : f32"),
        (A.FloatAttr(-math.inf, f16), "0xFC00 : f16"),
        (A.FloatAttr(math.inf, bf16), "0x7F80 : bf16"),
        (A.FloatAttr(math.inf, f64), "0x7FF0000000000000 : f64"),
        (A.BoolAttr(True), "true"),
        (A.StringAttr('say "hi"\n\x01'), r'"say \"hi\"\n\01"'),
        (A.ArrayAttr((A.IntegerAttr(0), A.IntegerAttr(2))), "[0, 2]"),
        (A.SymbolRefAttr("f"), "@f"),
        (A.TypeAttr(TensorType((2,), f32)), "tensor<2xf32>"),
        (A.DenseElementsAttr(np.array([[1, 2]]), TensorType((1, 2), f32)), "dense<[[1.0, 2.0]]> : tensor<1x2xf32>"),
        (A.DenseElementsAttr(np.float32(0.5), TensorType((4, 4), f32)), "dense<0.5> : tensor<4x4xf32>"),
        (A.DenseElementsAttr(np.array([True, False]), TensorType((2,), i1)), "dense<[true, false]> : tensor<2xi1>"),
        (A.DenseElementsAttr(np.array([0.1, 0.2]), TensorType((2,), f16)), "dense<[0.1, 0.2]> : tensor<2xf16>"),
        (A.DenseElementsAttr(np.array([1, -2]), TensorType((2,), i64)), "dense<[1, -2]> : tensor<2xi64>"),
    ],
)
def test_attribute_spelling(attr, text):
    assert str(attr) == text


def test_from_python_wraps_values():
    assert A.from_python(True) == A.BoolAttr(True)
    assert A.from_python(3) == A.IntegerAttr(3)
    assert A.from_python(0.5) == A.FloatAttr(0.5)
    assert A.from_python("x") == A.StringAttr("x")
    assert A.from_python([1, [2.0]]) == A.ArrayAttr((A.IntegerAttr(1), A.ArrayAttr((A.FloatAttr(2.0),))))
    assert A.from_python(f32) == A.TypeAttr(f32)
    with pytest.raises(TypeError):
        A.from_python(object())


def test_dense_attributes_are_immutable_hashable_values():
    t = TensorType((2,), f32)
    a = A.DenseElementsAttr(np.array([1.0, np.nan]), t)
    b = A.DenseElementsAttr(np.array([1.0, np.nan]), t)
    assert a == b and hash(a) == hash(b) and a != A.DenseElementsAttr(np.array([1.0, 2.0]), t)
    with pytest.raises(ValueError):
        a.array[0] = 3.0
    bf = A.DenseElementsAttr(np.array([0.1]), TensorType((1,), bf16))
    assert bf.array[0] == np.float32(0.10009765625)  # stored rounded to bf16


def test_strings_quote_and_unquote():
    for text in ["", "plain", 'a"b', "back\\slash", "tab\tnew\nline", "\x00\x1f", "ünïcode"]:
        assert A.unquote_string(A.quote_string(text)) == text
    with pytest.raises(ValueError, match="invalid escape"):
        A.unquote_string(r'"\q"')


def roundtrip_attribute(text: str) -> str:
    """Print the attribute after parsing it inside an op, twice."""
    source = f'func.func @f() attributes {{foo.a = {text}}} {{\n  func.return\n}}\n'
    once = print_op(parse_module(source))
    twice = print_op(parse_module(once))
    assert once == twice
    return once.split("foo.a = ", 1)[1].split("}", 1)[0]


@pytest.mark.parametrize(
    "text, printed",
    [
        ("1", "1"),
        ("-7 : i32", "-7 : i32"),
        ("0x10", "16"),
        ("1 : f32", "1.0"),
        ("1 : i1", "true"),
        ("2.5e3", "2500.0"),
        ("1.0e-05 : f32", "1.0e-05"),
        ("0x7F800000 : f32", "0x7F800000 : f32"),
        ("0x7C00 : f16", "0x7C00 : f16"),
        ("0xFF80 : bf16", "0xFF80 : bf16"),
        ("0x7FF8000000000000 : f64", "0x7FF8000000000000 : f64"),
        ('"tanh"', '"tanh"'),
        ("[0, 2, 1]", "[0, 2, 1]"),
        ("[]", "[]"),
        ("[[1, 2], [true, \"s\"]]", '[[1, 2], [true, "s"]]'),
        ("tensor<2xf32>", "tensor<2xf32>"),
        ("(tensor<2xf32>) -> i1", "(tensor<2xf32>) -> i1"),
        ("@callee", "@callee"),
        ("unit", "unit"),
        ("dense<[[1.0, 2.0]]> : tensor<1x2xf32>", "dense<[[1.0, 2.0]]> : tensor<1x2xf32>"),
        ("dense<0.5> : tensor<4x4xf32>", "dense<0.5> : tensor<4x4xf32>"),
        ("dense<[0x7C00, 1.0]> : tensor<2xf16>", "dense<[0x7C00, 1.0]> : tensor<2xf16>"),
        ("dense<[0.1, 3.0]> : tensor<2xbf16>", "dense<[0.1, 3.0]> : tensor<2xbf16>"),
        ("dense<[1, 0]> : tensor<2xi1>", "dense<[true, false]> : tensor<2xi1>"),
        ('dense<"0x0000803F00000040"> : tensor<2xf32>', "dense<[1.0, 2.0]> : tensor<2xf32>"),
        ('dense<"0x0000803F"> : tensor<3xf32>', "dense<1.0> : tensor<3xf32>"),
        ("dense<> : tensor<0xf32>", "dense<> : tensor<0xf32>"),
        ("dense<> : tensor<0x3xf32>", "dense<> : tensor<0x3xf32>"),
        ("dense<7> : tensor<i32>", "dense<7> : tensor<i32>"),
    ],
)
def test_attribute_literals_parse_and_round_trip(text, printed):
    assert roundtrip_attribute(text) == printed


@pytest.mark.parametrize("element", [f32, f16, bf16, i1, i32, i64])
def test_large_dense_attributes_use_exact_hex(element):
    t = TensorType((10, 10), element)
    rng = np.random.default_rng(0)
    values = rng.standard_normal(t.shape) * 100 if element.is_float else rng.integers(0, 2 if element is i1 else 1000, t.shape)
    attr = A.DenseElementsAttr(values, t)
    assert str(attr).startswith('dense<"0x')
    parsed = parse_module(f"func.func @f() attributes {{foo.a = {attr}}} {{\n  func.return\n}}\n")
    assert parsed.body.first_op.attributes["foo.a"] == attr
