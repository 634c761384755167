"""`test-inject-fault{group=N}`: a test-only pass that makes one fusion group compute wrong numbers.

It exists to test `fusecc bisect` (driver/bisect.py): inserted anywhere in
a pipeline, it doubles what group N produces, at whatever level the IR is
when it runs:

* at the tensor level (a `fusion.group` with `id = N`): each float value the
  group yields becomes `tensor.add %v, %v`;
* at the loop level (`loop.kernel`s with `group = N`): each float value a
  kernel stores becomes `arith.add %v, %v`.

Like mlir-opt's test passes it is registered under a `test-` prefix, is not
listed by `--list-passes` unless asked (`list_passes(include_test=True)`), and
no default pipeline contains it (tests/driver/test_bisect.py checks both).
"""

from __future__ import annotations

from dataclasses import dataclass

from fusecc.compiler.ir import Operation
from fusecc.compiler.pass_manager import Pass, PassContext
from fusecc.compiler.types import TensorType
from fusecc.dialects import arith, loop
from fusecc.dialects import tensor as T


def _is_float(t) -> bool:
    element = t.element_type if isinstance(t, TensorType) else t
    return getattr(element, "is_float", False)


def _double_group_results(group: Operation) -> int:
    body = group.regions[0].block
    terminator = body.last_op
    changed = 0
    for index, value in enumerate(terminator.operands):
        if _is_float(value.type):
            doubled = body.insert_before(T.AddOp([value, value], [value.type], {}, location=terminator.location), terminator)
            terminator.set_operand(index, doubled.results[0])
            changed += 1
    return changed


def _double_kernel_stores(kernel: Operation) -> int:
    changed = 0
    for store in [op for op in kernel.walk() if isinstance(op, loop.StoreOp)]:
        value = store.operands[0]
        if _is_float(value.type):
            block = store.parent
            doubled = block.insert_before(arith.AddOp([value, value], [value.type], {}, location=store.location), store)
            store.set_operand(0, doubled.results[0])
            changed += 1
    return changed


@dataclass(frozen=True)
class InjectFault(Pass):
    name = "test-inject-fault"
    summary = "(test only) double the float results of fusion group N, at the tensor or loop level"
    group: int = 0

    def run(self, op: Operation, context: PassContext) -> None:
        changed = 0
        for candidate in list(op.walk()):
            if candidate.name == "fusion.group" and candidate.attr("id") == self.group:
                changed += _double_group_results(candidate)
            elif isinstance(candidate, loop.KernelOp) and candidate.attr("group") == self.group:
                changed += _double_kernel_stores(candidate)
        context.statistics["test-inject-fault.changed"] = context.statistics.get("test-inject-fault.changed", 0) + changed
