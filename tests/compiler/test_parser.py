"""The parser: both op forms, modules, locations, comments, split markers,
and located errors for malformed input."""

from __future__ import annotations

import pytest

from fusecc.compiler.diagnostics import DiagnosticError, FileLineColLoc, FusedLoc, NameLoc, UnknownLoc
from fusecc.compiler.parser import parse_module, split_input
from fusecc.compiler.printer import print_op
from fusecc.compiler.verifier import verify

CUSTOM = """\
func.func @f(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = tensor.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = tensor.softmax %0 {axis = -1} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %1 : tensor<4x8xf32>
}
"""

GENERIC = """\
"builtin.module"() ({
  "func.func"() ({
  ^bb0(%x: tensor<4x8xf32>, %b: tensor<8xf32>):
    %0 = "tensor.add"(%x, %b) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %1 = "tensor.softmax"(%0) {axis = -1} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    "func.return"(%1) : (tensor<4x8xf32>) -> ()
  }) {sym_name = "f", function_type = (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>} : () -> ()
}) : () -> ()
"""


def roundtrip(text: str) -> str:
    module = parse_module(text)
    verify(module)
    return print_op(module)


def test_custom_and_generic_forms_are_the_same_program():
    assert roundtrip(CUSTOM) == roundtrip(GENERIC)
    assert print_op(parse_module(CUSTOM), generic=True) == GENERIC


def test_module_wrapper_is_optional_and_kept_with_name_and_attributes():
    wrapped = "module {\n" + CUSTOM + "}\n"
    assert roundtrip(wrapped) == roundtrip(CUSTOM)
    named = roundtrip('module @m attributes {fusecc.note = "x"} {\n' + CUSTOM + "}\n")
    assert named.startswith('module @m attributes {fusecc.note = "x"} {\n')


def test_custom_form_mixes_with_generic_ops_and_infers_result_types():
    text = """\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = "tensor.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %b = tensor.mul %a, %x
  func.return %b : tensor<4xf32>
}
"""
    printed = roundtrip(text)
    assert "%b = tensor.mul %a, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>" in printed


def test_comments_and_blank_lines_are_ignored():
    text = "// header\n\n" + CUSTOM.replace("{\n", "{ // trailing comment\n", 1) + "// footer"
    assert roundtrip(text) == roundtrip(CUSTOM)


def test_names_are_kept_and_numbers_renumbered():
    text = """\
func.func @f(%input: tensor<4xf32>) -> tensor<4xf32> {
  %7 = tensor.exp %input : (tensor<4xf32>) -> tensor<4xf32>
  %scaled = tensor.mul %7, %7 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = tensor.neg %scaled : (tensor<4xf32>) -> tensor<4xf32>
  func.return %3 : tensor<4xf32>
}
"""
    printed = roundtrip(text)
    assert "%0 = tensor.exp %input" in printed
    assert "%scaled = tensor.mul %0, %0" in printed
    assert "%1 = tensor.neg %scaled" in printed


MULTI = """\
func.func @pair(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = tensor.neg %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %x, %0 : tensor<4xf32>, tensor<4xf32>
}
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r:2 = func.call @pair(%x) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  %lo, %hi = func.call @pair(%x) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  %s = tensor.add %r#1, %hi : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %t = tensor.add %s, %r#0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %t : tensor<4xf32>
}
"""


def test_multiple_results_and_calls():
    module = parse_module(MULTI)
    verify(module)
    main = module.lookup("main")
    call_group, call_named, add, add2, _ = list(main.body)
    assert add.lhs is call_group.results[1] and add.rhs is call_named.results[1]
    assert add2.rhs is call_group.results[0]
    printed = print_op(module)
    assert "%r:2 = func.call @pair(%x)" in printed and "%lo, %hi = func.call @pair(%x)" in printed
    assert "tensor.add %r#1, %hi" in printed
    assert roundtrip(printed) == printed
    assert roundtrip(print_op(module, generic=True)) == printed


def test_locations_are_parsed_kept_and_defaulted():
    text = """\
func.func @f(%x: tensor<4xf32> loc("model.py":1:1)) -> tensor<4xf32> {
  %0 = tensor.exp %x : (tensor<4xf32>) -> tensor<4xf32> loc("model.py":3:7)
  %1 = tensor.neg %0 : (tensor<4xf32>) -> tensor<4xf32> loc("gelu"("model.py":4:2))
  %2 = tensor.abs %1 : (tensor<4xf32>) -> tensor<4xf32> loc(fused["a.py":1:2, "b.py":3:4])
  %3 = tensor.tanh %2 : (tensor<4xf32>) -> tensor<4xf32> loc(unknown)
  func.return %3 : tensor<4xf32>
}
"""
    module = parse_module(text, "input.ir")
    exp, neg, abs_, tanh, ret = list(module.lookup("f").body)
    assert exp.location == FileLineColLoc("model.py", 3, 7)
    assert neg.location == NameLoc("gelu", FileLineColLoc("model.py", 4, 2))
    assert isinstance(abs_.location, FusedLoc) and abs_.location.file_line_col() == FileLineColLoc("a.py", 1, 2)
    assert isinstance(tanh.location, UnknownLoc)
    assert ret.location == FileLineColLoc("input.ir", 6, 3)  # where the op was written
    printed = print_op(module, debuginfo=True)
    assert 'loc("model.py":3:7)' in printed and 'loc("gelu"("model.py":4:2))' in printed
    assert 'loc(fused["a.py":1:2, "b.py":3:4])' in printed and "loc(unknown)" in printed
    assert print_op(parse_module(printed), debuginfo=True) == printed


def test_split_input_keeps_line_numbers():
    text = "a\n// -----\nb\nc\n  // -----  \nd"
    chunks = split_input(text)
    assert chunks == [("a", 0), ("b\nc", 2), ("d", 5)]
    bad = CUSTOM + "// -----\nfunc.func @g() {\n  func.return %nope\n}\n"
    second, offset = split_input(bad)[1]
    with pytest.raises(DiagnosticError) as info:
        parse_module(second, "t.ir", offset)
    assert info.value.diagnostic.location == FileLineColLoc("t.ir", 8, 15)


def test_regions_with_block_arguments():
    text = """\
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = fusion.group %x, %y {kind = "elementwise"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>):
    %1 = tensor.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    fusion.yield %1 : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}
"""
    printed = roundtrip(text)
    assert printed == roundtrip(printed)
    assert "^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>):" in printed
    generic = print_op(parse_module(text), generic=True)
    assert roundtrip(generic) == printed


def test_attribute_dictionaries_after_attributes_keyword_take_dotted_unit_keys():
    printed = roundtrip('func.func @f() attributes {fusecc.entry, fusecc.name = "f"} {\n  func.return\n}\n')
    assert 'attributes {fusecc.entry = unit, fusecc.name = "f"}' in printed


def parse_error(text: str):
    with pytest.raises(DiagnosticError) as info:
        module = parse_module(text, "bad.ir")
        verify(module)
    diagnostic = info.value.diagnostic
    position = diagnostic.location.file_line_col()
    return position.line, position.col, diagnostic.message


F = "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
END = "  func.return %x : tensor<4xf32>\n}\n"


@pytest.mark.parametrize(
    "text, line, col, message",
    [
        (F, 1, 51, "unexpected end of input; expected an operation, '}' or a block label"),
        (F + "  %0 = tensor.exp %x : (tensor<4xf32>) -> \n" + END, 3, 3, "expected '(' or a type, got 'func.return'"),
        (F + "  %0 = tensor.nope %x : (tensor<4xf32>) -> tensor<4xf32>\n" + END, 2, 8, "unknown operation 'tensor.nope'"),
        (F + "  %0 = tensor.exp %y : (tensor<4xf32>) -> tensor<4xf32>\n" + END, 2, 19, "use of undefined value '%y'"),
        (F + "  %x = tensor.exp %x : (tensor<4xf32>) -> tensor<4xf32>\n" + END, 2, 3, "redefinition of SSA value '%x'"),
        (F + "  %0 = tensor.exp %x : (tensor<8xf32>) -> tensor<8xf32>\n" + END, 2, 19, "expects type tensor<8xf32>, but it has type tensor<4xf32>"),
        (F + "  %0 = tensor.exp %x, %x : (tensor<4xf32>) -> tensor<4xf32>\n" + END, 2, 8, "has 2 operands but 1 operand type"),
        (F + "  %0:2 = tensor.exp %x : (tensor<4xf32>) -> tensor<4xf32>\n" + END, 2, 3, "defines 2 result names but has 1 result type"),
        (F + "  %0 = tensor.exp %x#1 : (tensor<4xf32>) -> tensor<4xf32>\n" + END, 2, 19, "single result, not #1"),
        (F + "  %0 = tensor.exp %x : (tensor<4xf32>) -> tensor<4xf33>\n" + END, 2, 43, "unknown element type 'f33'"),
        (F + "  %0 = tensor.exp %x {foo.s = \"\\q\"} : (tensor<4xf32>) -> tensor<4xf32>\n" + END, 2, 31, "invalid escape"),
        (F + "  %0 = tensor.exp %x {foo.i = 300 : i8} : (tensor<4xf32>) -> tensor<4xf32>\n" + END, 2, 31, "out of range for i8"),
        (F + "  %0 = tensor.exp %x {foo.i = 1 : i8, foo.i = 2} : (tensor<4xf32>) -> tensor<4xf32>\n" + END, 2, 39, "duplicate attribute 'foo.i'"),
        (F + "  %0 = tensor.exp %x {foo.f = 1.5 : i32} : (tensor<4xf32>) -> tensor<4xf32>\n" + END, 2, 31, "float literal 1.5 with non-float type i32"),
        (F + "  %0 = tensor.exp %x {foo.d = dense<[1.0, 2.0]> : tensor<3xf32>} : (tensor<4xf32>) -> tensor<4xf32>\n" + END, 2, 51, "dense literal has shape [2]"),
        (F + "  %0 = tensor.exp %x {foo.d = dense<\"0x00\"> : tensor<3xf32>} : (tensor<4xf32>) -> tensor<4xf32>\n" + END, 2, 37, "not a whole number of f32 elements"),
        (F + "  %0 = tensor.exp %x {foo.d = 0x7F8000000 : f32} : (tensor<4xf32>) -> tensor<4xf32>\n" + END, 2, 31, "more than 32 bits"),
        (F + "  %0 = tensor.exp %x $ : (tensor<4xf32>) -> tensor<4xf32>\n" + END, 2, 22, "unexpected character '$'"),
        ("module {\n}\n" + F + END, 3, 1, "either one 'module"),
        (F + END + F + END, 4, 1, "redefinition of symbol @f"),
        ("func.func @f() {\n  %0:2 = func.call @f() : () -> (tensor<f32>, tensor<f32>)\n  func.return %0 : tensor<f32>\n}\n", 3, 15, "names 2 results; pick one with '%0#N'"),
    ],
)
def test_errors_are_located(text, line, col, message):
    got_line, got_col, got_message = parse_error(text)
    assert message in got_message
    assert (got_line, got_col) == (line, col), got_message
