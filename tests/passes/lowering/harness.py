"""Differential testing of the lowering: the loop interpreter's numbers after
`lower-to-loops` (and `plan-memory`) against the reference interpreter's
before, plus the independent memory-plan checker.

Tolerance: elementwise and layout groups compute the same f32 operations
in the same order as the reference, so their results must be equal up to
`ELEMENTWISE` (1e-6 relative, a last-bit difference in a libm function at
most); groups that reduce sum in another order than numpy's pairwise
summation, so they get `REDUCTION` (1e-5 relative and absolute, about
100 ulps for the rows of a few hundred elements the tests use). f16
intermediates stay in f32 inside a kernel while the reference rounds
every op's result to f16, so f16 programs get `HALF` (an f16 ulp). Whole
programs chain reductions (matmuls over unscaled random data reach values
of 100), so reordering errors compound: `PROGRAM` (1e-4).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from fusecc.compiler import parse_module, print_op, verify
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.dialects import func as F
from fusecc.dialects import loop
from fusecc.dialects.fusion import GroupOp, YieldOp
from fusecc.passes.memory.check import check_module
from fusecc.runtime.loop_interpreter import run_schedule
from fusecc.runtime.reference import evaluate, random_input

ELEMENTWISE = dict(rtol=1e-6, atol=1e-7)
REDUCTION = dict(rtol=1e-5, atol=1e-5)
HALF = dict(rtol=2e-3, atol=2e-3)
PROGRAM = dict(rtol=1e-4, atol=1e-4)
TARGETS = ("h200", "cpu")


def parse(text: str) -> Operation:
    module = parse_module(text)
    verify(module)
    return module


def lower(module: Operation, target: str, extra: str = "", plan: bool = True) -> Operation:
    """A lowered copy of `module` (the input is left alone), re-parsed from
    its printed form so the golden text is what runs."""
    copy = parse_module(print_op(module))
    pipeline = ",".join(p for p in (extra, f"lower-to-loops{{target={target}}}", "plan-memory" if plan else "") if p)
    run_pipeline(parse_pipeline(pipeline), copy, PassContext(target=target))
    lowered = parse_module(print_op(copy))
    verify(lowered)
    return lowered


def inputs_for(module: Operation, entry: str = "main", seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    f = module.lookup(entry)
    return [random_input(t, rng) for t in f.function_type.inputs]


def check_lowering(module: Operation, target: str, tolerance=REDUCTION, extra: str = "", entry: str = "main", seed: int = 0) -> Operation:
    """Lower for `target`, run both interpreters, compare; returns the lowered module."""
    inputs = inputs_for(module, entry, seed)
    expected = evaluate(module, entry, inputs)
    lowered = lower(module, target, extra)
    problems = check_module(lowered, alignment=256 if target != "cpu" else 64)
    assert not problems, problems
    actual = run_schedule(lowered, entry, inputs)
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape, (i, a.shape, e.shape)
        assert a.dtype == e.dtype, (i, a.dtype, e.dtype)
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, e, **tolerance, err_msg=f"result {i} on {target}")
        else:
            np.testing.assert_array_equal(a, e, err_msg=f"result {i} on {target}")
    return lowered


def kernels(module: Operation) -> list[loop.KernelOp]:
    return [op for op in module.body if isinstance(op, loop.KernelOp)]


def launches(module: Operation, schedule: str = "main") -> list[str]:
    return [op.kernel_name for op in module.lookup(schedule).body if isinstance(op, loop.LaunchOp)]


# --------------------------------------------------------------------------- grouping by hand


def form_group(ops: Sequence[Operation], kind: str) -> GroupOp:
    """Put consecutive ops of one block into a fusion group (consecutive ops
    of a topological order are always a legal, convex group)."""
    ops = list(ops)
    inside = set(ops)
    inputs: list[Value] = []
    for op in ops:
        for v in op.operands:
            if v.defining_op not in inside and v not in inputs:
                inputs.append(v)
    outputs = [r for op in ops for r in op.results if any(user not in inside for user in r.users)]
    group = GroupOp.build(inputs, [r.type for r in outputs], kind, ops[0].location)
    mapping = dict(zip(inputs, group.body.args))
    for op in ops:
        group.body.append(op.clone(mapping))
    group.body.append(YieldOp.create([mapping[r] for r in outputs]))
    block = ops[0].parent
    block.insert_before(group, ops[0])
    for old, new in zip(outputs, group.results):
        old.replace_uses_where(new, lambda user: user not in inside)
    for op in ops:
        op.drop_operand_uses()
    for op in ops:
        op.detach()
    return group


def kind_of(ops: Sequence[Operation]) -> str:
    names = {op.name for op in ops}
    if names & {"tensor.matmul", "tensor.attention"}:
        return "opaque"
    from fusecc.passes.lowering.reduction_analysis import RULES

    if names & set(RULES):
        return "reduction"
    return "elementwise"


def group_consecutive(module: Operation, sizes: Sequence[int]) -> Operation:
    """Group the ops of @main (constants and reshapes included) into
    consecutive runs of the given sizes, cycling through `sizes`."""
    f = module.lookup("main")
    ops = [op for op in f.body if not isinstance(op, F.ReturnOp)]
    position, n = 0, 0
    while position < len(ops):
        size = sizes[n % len(sizes)]
        run = ops[position : position + size]
        position += size
        n += 1
        if size > 1 or n % 2:
            form_group(run, kind_of(run))
    verify(module)
    return module
