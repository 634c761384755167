"""lower-to-loops: schedules, buffers for returned values, names, errors."""

from __future__ import annotations

import pytest
from harness import ELEMENTWISE, TARGETS, check_lowering, kernels, launches, lower, parse

from fusecc.compiler.diagnostics import DiagnosticError, InternalCompilerError
from fusecc.dialects import loop
from fusecc.passes.lowering.interface import TEMPLATES

RETURNS = """
func.func @main(%x: tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<24xf32>, tensor<4x6xf32>, tensor<2xf32>, tensor<4x6xf32>, tensor<3x8xf32>) {
  %c = tensor.constant {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %e = fusion.group %x {kind = "elementwise"} : (tensor<4x6xf32>) -> tensor<4x6xf32> {
  ^bb0(%a: tensor<4x6xf32>):
    %0 = tensor.exp %a : (tensor<4x6xf32>) -> tensor<4x6xf32>
    fusion.yield %0 : tensor<4x6xf32>
  }
  %r = tensor.reshape %e : (tensor<4x6xf32>) -> tensor<24xf32>
  %t = tensor.reshape %x : (tensor<4x6xf32>) -> tensor<3x8xf32>
  func.return %e, %r, %x, %c, %e, %t : tensor<4x6xf32>, tensor<24xf32>, tensor<4x6xf32>, tensor<2xf32>, tensor<4x6xf32>, tensor<3x8xf32>
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_returned_values_get_their_result_buffers(target):
    lowered = check_lowering(parse(RETURNS), target, ELEMENTWISE)
    schedule = lowered.lookup("main")
    assert schedule.inputs == ["x"] and schedule.outputs == [f"result{i}" for i in range(6)]
    (launch,) = schedule.launches()
    out = schedule.output_args
    assert launch.operands[1] is out[0]  # the group writes result0 itself
    copies = [(op.source, op.target) for op in schedule.body if isinstance(op, loop.CopyOp)]
    assert [t for _, t in copies] == [out[1], out[2], out[3], out[4], out[5]]
    assert copies[1][0] is schedule.input_args[0]  # a returned input is copied
    assert isinstance(copies[2][0].defining_op, loop.ConstantOp)
    assert schedule.arena_size == 0  # nothing intermediate


RESHAPED_RESULT = """
func.func @main(%x: tensor<4x6xf32>) -> tensor<24xf32> {
  %e = fusion.group %x {kind = "elementwise"} : (tensor<4x6xf32>) -> tensor<4x6xf32> {
  ^bb0(%a: tensor<4x6xf32>):
    %0 = tensor.exp %a : (tensor<4x6xf32>) -> tensor<4x6xf32>
    fusion.yield %0 : tensor<4x6xf32>
  }
  %r = tensor.reshape %e : (tensor<4x6xf32>) -> tensor<24xf32>
  func.return %r : tensor<24xf32>
}
"""


def test_a_result_returned_reshaped_is_written_through_a_view():
    lowered = check_lowering(parse(RESHAPED_RESULT), "cpu", ELEMENTWISE)
    schedule = lowered.lookup("main")
    (launch,) = schedule.launches()
    view = launch.operands[1].defining_op
    assert isinstance(view, loop.ViewOp) and view.source is schedule.output_args[0]
    assert not [op for op in schedule.body if isinstance(op, loop.CopyOp)]


TWO_FUNCTIONS = """
func.func @first(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = tensor.exp %x : (tensor<8xf32>) -> tensor<8xf32>
  %dead = tensor.tanh %0 : (tensor<8xf32>) -> tensor<8xf32>
  %dead2 = tensor.reshape %dead : (tensor<8xf32>) -> tensor<2x4xf32>
  %1 = tensor.neg %0 : (tensor<8xf32>) -> tensor<8xf32>
  func.return %1 : tensor<8xf32>
}
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = tensor.tanh %x : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
"""


def test_every_function_gets_a_schedule_and_kernel_names_are_unique():
    """(and what nobody reads gets no kernel)"""
    module = parse(TWO_FUNCTIONS)
    lowered = check_lowering(module, "h200", ELEMENTWISE)
    check_lowering(module, "h200", ELEMENTWISE, entry="first")
    assert [op.sym_name for op in lowered.body if isinstance(op, loop.ScheduleOp)] == ["first", "main"]
    names = [k.sym_name for k in kernels(lowered)]
    assert len(names) == len(set(names)) == 3
    assert launches(lowered, "first") == ["fused_0_elementwise", "fused_1_elementwise"]
    assert launches(lowered, "main") == ["fused_2_elementwise"]


def test_calls_must_be_inlined_first():
    module = parse(
        """
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""
    )
    with pytest.raises(DiagnosticError, match="needs calls inlined"):
        lower(module, "cpu")


def test_a_kind_without_template_is_an_internal_error_naming_the_group(monkeypatch):
    from fusecc.passes.lowering.driver import load_templates

    load_templates()
    monkeypatch.delitem(TEMPLATES, "elementwise")
    with pytest.raises(InternalCompilerError, match="no kernel template for group 0 of kind 'elementwise'"):
        lower(parse(RESHAPED_RESULT), "cpu")


def test_template_refusals_are_located_internal_errors(monkeypatch):
    # fusion forms only groups the templates can lower: a refusal is fusecc's bug (issue 16)
    from fusecc.passes.lowering.driver import load_templates
    from fusecc.passes.lowering.scalar_emitter import LoweringError

    def refuse(group, hw):
        raise LoweringError("no way")

    load_templates()
    monkeypatch.setitem(TEMPLATES, "elementwise", refuse)
    with pytest.raises(InternalCompilerError, match=r"cannot lower group 0 \(elementwise\): no way") as info:
        lower(parse(RESHAPED_RESULT), "cpu")
    assert info.value.diagnostic.location.file_line_col().line == 3
    assert "fusion formed a group its lowering cannot lower" in info.value.diagnostic.notes[-1].message


def test_unknown_target_is_an_error():
    with pytest.raises(DiagnosticError, match="unknown hardware 'tpu'"):
        lower(parse(RESHAPED_RESULT), "tpu")


def test_emit_levels_run_tiling_lowering_and_planning():
    from fusecc.driver.pipelines import pipeline_for_level

    assert pipeline_for_level("tiled", "cpu").endswith("fuse{target=cpu},tile{target=cpu}")
    assert "tile{target=a100},lower-to-loops{target=a100},plan-memory,legalize{target=a100}," in pipeline_for_level("loop", "a100")
