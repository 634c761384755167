"""legalize at the loop level: the interpreter gives the same bits before
and after it, and those are the behaviours docs/legalize.md chose; legal
IR has no op a backend would have to decide about; the pass is idempotent."""

from __future__ import annotations

import numpy as np
import pytest

from legalize_cases import CASES
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.compiler.printer import print_op as print_module
from fusecc.compiler.types import bf16, f16, i1
from fusecc.dialects import arith
from fusecc.runtime.loop_interpreter import run_schedule


def legalized(module, target="cpu"):
    run_pipeline(parse_pipeline(f"legalize{{target={target}}}"), module, PassContext(target=target))
    return module


def bits(array):
    array = np.asarray(array)
    return array.view(np.uint8) if array.dtype != np.bool_ else array


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_interpreter_agrees_before_and_after_legalize_and_gives_the_chosen_behaviour(case):
    inputs = case.inputs()
    (before,) = run_schedule(case.program(), "main", inputs)
    (after,) = run_schedule(legalized(case.program()), "main", inputs)
    np.testing.assert_array_equal(bits(after), bits(before))
    expected = np.array(case.expected, dtype=before.dtype)
    np.testing.assert_array_equal(before, expected)
    if before.dtype.kind == "f":  # -0.0 is not 0.0 here (a NaN's sign means nothing)
        numbers = ~np.isnan(expected)
        np.testing.assert_array_equal(np.signbit(before[numbers]), np.signbit(expected[numbers]))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_legal_ir_leaves_backends_no_decision(case):
    module = legalized(case.program())
    for op in module.walk():
        if not op.name.startswith(("arith.", "math.")) or op.name == "arith.constant":
            continue
        types = [v.type for v in op.operands] + [v.type for v in op.results]
        if op.name == "arith.cast":
            source, target = op.input.type, op.result.type
            assert target is not i1 or source is i1, "x -> i1 is a comparison"
            if source in (bf16, f16) or target in (bf16, f16):
                assert "f32" in (source.name, target.name), f"{source} -> {target} must go through f32"
            if source.is_float and not target.is_float:  # only in-range values: a clamped select feeds it
                assert isinstance(op.input.defining_op, arith.SelectOp)
        elif op.name != "arith.select":
            assert not any(t in (bf16, f16) for t in types), f"{op.name} computes on a narrow float"
        if op.name in ("arith.add", "arith.sub", "arith.mul", "arith.div", "arith.rem", "arith.max", "arith.min", "arith.neg"):
            assert op.results[0].type is not i1, f"{op.name} on i1"
        if op.name in ("arith.div", "arith.rem") and op.operands[0].type.is_integer:
            divisor = op.operands[1].defining_op
            assert isinstance(divisor, (arith.SelectOp, arith.ConstantOp)), "the divisor is guarded"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_legalize_is_idempotent_and_the_same_for_every_target(case):
    once = print_module(legalized(case.program()))
    assert print_module(legalized(legalized(case.program()), "h200")) == once
    assert print_module(legalized(case.program(), "a100")) == once


def test_unknown_target_is_a_located_error():
    from fusecc.compiler.diagnostics import DiagnosticError

    with pytest.raises(DiagnosticError, match="legalize"):
        legalized(CASES[0].program(), "tpu")
