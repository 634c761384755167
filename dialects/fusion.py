"""The `fusion` dialect: groups of tensor ops that become one kernel.

    %r:2 = fusion.group %a, %b {kind = "elementwise"} : (A, B) -> (R0, R1) {
    ^bb0(%x: A, %y: B):
      %0 = tensor.add %x, %y : (A, B) -> R0
      %1 = tensor.relu %0 : (R0) -> R1
      fusion.yield %0, %1 : R0, R1
    }

A group is isolated from above: its block arguments stand for its operands
one to one, so its interface is explicit. Operands are the group's inputs
(read from memory), results its outputs (written to memory), and every
other value in the body an intermediate that lives only in registers or
shared memory.
"""

from __future__ import annotations

from fusecc.compiler.dim_binding import type_compatible
from fusecc.compiler.ir import Block, Operation, Region, Value, VerifyError
from fusecc.compiler.op_definitions import INT, REQUIRED, STRING, AttrDef, OperandDef, ResultDef, register_op
from fusecc.compiler.traits import IsolatedFromAbove, Pure, Terminator

GROUP_KINDS = ("elementwise", "injective", "reduction", "matmul", "horizontal", "attention", "opaque")


@register_op
class GroupOp(Operation):
    name = "fusion.group"
    traits = frozenset({IsolatedFromAbove, Pure})
    operand_defs = (OperandDef("inputs", variadic=True),)
    result_defs = (ResultDef("outputs", variadic=True),)
    attr_defs = (
        AttrDef("kind", STRING, REQUIRED, choices=GROUP_KINDS, doc="what lowering the group gets"),
        AttrDef("id", INT, None, doc="stable number used in remarks and kernel names"),
    )
    region_count = 1

    @classmethod
    def build(cls, inputs: list[Value], result_types, kind: str, location=None, group_id: int | None = None) -> "GroupOp":
        """An empty group whose block arguments mirror `inputs`."""
        block = Block([v.type for v in inputs])
        attrs = {"kind": kind} if group_id is None else {"kind": kind, "id": group_id}
        kwargs = {} if location is None else {"location": location}
        return cls.create(inputs, attrs, list(result_types), [Region([block])], **kwargs)

    @property
    def yield_op(self) -> "YieldOp":
        return self.body.last_op

    def body_ops(self) -> list[Operation]:
        """The computing ops, without the terminator."""
        return [op for op in self.body if not isinstance(op, YieldOp)]

    def intermediates(self) -> list[Value]:
        """Values computed inside and never written to memory."""
        yielded = set(self.yield_op.operands)
        return [r for op in self.body_ops() for r in op.results if r not in yielded]

    def region_argument_types(self) -> list:
        """The body's arguments are the inputs (their `?` dims bind to them when parsed)."""
        return [v.type for v in self.operands]

    def bind_results_from_regions(self) -> None:
        """Results written with `?` dims take the yielded values' types."""
        terminator = self.body.last_op if self.regions and self.regions[0].blocks else None
        if terminator is None or len(terminator.operands) != len(self.results):
            return
        for result, value in zip(self.results, terminator.operands):
            if type_compatible(value.type, result.type):
                result.type = value.type

    def verify_(self) -> None:
        if len(self.regions[0].blocks) != 1:
            raise VerifyError("expects a body of one block")
        args = self.body.args
        if len(args) != len(self.operands):
            raise VerifyError(f"has {len(self.operands)} inputs but its body takes {len(args)} arguments")
        for i, (arg, value) in enumerate(zip(args, self.operands)):
            if arg.type is not value.type:
                raise VerifyError(f"body argument {i} has type {arg.type} but input {i} has type {value.type}")
        terminator = self.body.last_op
        if not isinstance(terminator, YieldOp):
            raise VerifyError("body must end with 'fusion.yield'")
        if [v.type for v in terminator.operands] != self.result_types:
            raise VerifyError("'fusion.yield' types do not match the group's result types")
        for op in self.body_ops():
            if isinstance(op, GroupOp):
                raise VerifyError("groups do not nest")


@register_op
class YieldOp(Operation):
    name = "fusion.yield"
    traits = frozenset({Terminator, Pure})
    operand_defs = (OperandDef("values", variadic=True),)

    def verify_(self) -> None:
        if not isinstance(self.parent_op, GroupOp):
            raise VerifyError("must be inside a 'fusion.group'")
