"""driver/bisect.py and the test-only pass it is tested with
(passes/transforms/inject_fault.py): a fault planted in one fusion group at
one point of the pipeline is found there, and nowhere earlier."""

from __future__ import annotations

import numpy as np
import pytest

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.compiler.parser import parse_module
from fusecc.compiler.pass_manager import PassContext, list_passes, parse_pipeline, run_pipeline
from fusecc.driver import bisect, measure
from fusecc.driver.pipelines import EMIT_LEVELS, pipeline_for_level
from fusecc.runtime.loop_interpreter import LoopInterpreter
from fusecc.runtime.reference import evaluate

# four groups: elementwise 0, matmul 1, elementwise 2 (fusion.forbid), reduction 3
PROGRAM = """\
func.func @main(%x: tensor<8x16xf32>, %w: tensor<16x8xf32>, %y: tensor<8x8xf32>) -> tensor<8xf32> {
  %a = tensor.exp %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %m = tensor.matmul %a, %w : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %s = tensor.add %m, %y {fusion.forbid = true} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %r = tensor.reduce_sum %s {axes = [1]} : (tensor<8x8xf32>) -> tensor<8xf32>
  func.return %r : tensor<8xf32>
}
"""
KINDS = {0: "elementwise", 1: "matmul", 2: "elementwise", 3: "reduction"}


def program():
    return parse_module(PROGRAM, "three.ir")


def inputs():
    return measure.model_inputs(program().lookup("main"), 0)


def run_bisect(after: str | None, group: int, target: str = "cpu"):
    insert = [(after, f"test-inject-fault{{group={group}}}")] if after else []
    return bisect.bisect(program(), "main", inputs(), target=target, insert=insert)


def test_test_passes_are_hidden_and_never_in_a_default_pipeline():
    assert "test-inject-fault" not in list_passes()
    assert "test-inject-fault" in list_passes(include_test=True)
    for level in EMIT_LEVELS:
        for target in ("cpu", "h200", "a100"):
            assert "test-" not in pipeline_for_level(level, target=target)


def test_the_fault_doubles_a_groups_results_at_the_tensor_level():
    module = program()
    want = evaluate(module, "main", inputs())
    run_pipeline(parse_pipeline("fuse{target=cpu},test-inject-fault{group=3}"), module, PassContext(target="cpu"))
    np.testing.assert_allclose(evaluate(module, "main", inputs())[0], 2 * want[0], rtol=1e-6)


def test_the_fault_doubles_a_kernels_stores_at_the_loop_level():
    module = program()
    want = evaluate(module, "main", inputs())
    text = pipeline_for_level("loop", target="cpu") + ",test-inject-fault{group=3}"
    run_pipeline(parse_pipeline(text), module, PassContext(target="cpu"))
    np.testing.assert_allclose(LoopInterpreter(module).run_schedule("main", inputs())[0], 2 * want[0], rtol=1e-5)


def test_no_fault_nothing_to_bisect():
    result = run_bisect(None, 0)
    assert result.agrees and result.reproducer is None and result.culprit is None


@pytest.mark.parametrize(
    "after,group,level",
    [
        ("fuse", 2, "tensor"),
        ("tile", 1, "tensor"),
        ("lower-to-loops", 3, "loop"),
        ("legalize", 0, "loop"),
    ],
)
def test_the_planted_group_and_pass_are_found(after, group, level):
    result = run_bisect(after, group)
    assert not result.agrees
    # every group before it agrees alone, it does not
    assert [g["id"] for g in result.groups] == list(range(group + 1))
    assert all(g["error"] <= result.rtol for g in result.groups[:-1])
    assert result.group["id"] == group and result.group["kind"] == KINDS[group]
    # the passes before the planted one agree, the planted one is the first change
    names = [s.name for s in result.stages]
    assert result.culprit == "test-inject-fault"
    assert names[-1] == "test-inject-fault" and names[-2] == after
    assert result.stages[-1].level == level
    assert all(s.error is None or s.error <= result.rtol for s in result.stages[:-1])


def test_the_reproducer_holds_just_that_group_with_its_inputs():
    result = run_bisect("tile", 1)
    repro = parse_module(result.reproducer, "reproducer.ir")
    ops = [op.name for op in repro.lookup("main").body]
    assert ops == ["tensor.matmul", "func.return"]
    # its inputs are the reference intermediates of the matmul's operands: exp(x) and w
    x, w, _ = inputs()
    got = result.reproducer_inputs
    assert list(got) == ["a", "w"]
    np.testing.assert_allclose(got["a"], np.exp(x), rtol=1e-6)
    np.testing.assert_array_equal(got["w"], w)
    # group 1 of the reproducer does not exist (it has one group, id 0): the planted fault cannot fire
    assert result.reproducer_fails is False


def test_a_reproducer_that_fails_alone():
    result = run_bisect("lower-to-loops", 0)
    assert result.reproducer_fails is True


def test_a_fault_before_fusion_is_found_on_the_whole_program():
    # a pass that changes numbers before fusion: plant the fault after fuse's
    # own prefix by inserting a fuse + fault pair after cse (the groups exist then)
    insert = [("cse", "fuse{target=cpu},test-inject-fault{group=0}")]
    result = bisect.bisect(program(), "main", inputs(), insert=insert)
    assert result.culprit == "test-inject-fault" and result.group is None
    assert parse_module(result.reproducer, "r.ir").lookup("main") is not None


def test_cuda_sim_finds_the_group_too():
    pytest.importorskip("fusecc.runtime.cuda.cpu_harness")
    result = run_bisect("lower-to-loops", 2, target="cuda-sim")
    assert result.group["id"] == 2 and result.culprit == "test-inject-fault"


def test_unknown_insertion_point_is_refused():
    with pytest.raises(ValueError, match="cannot insert"):
        bisect.pipeline_entries("cpu", None, [("nosuch", "cse")])
