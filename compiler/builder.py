"""A builder that creates ops at an insertion point."""

from __future__ import annotations

from typing import Any, Sequence

from fusecc.compiler.diagnostics import UNKNOWN_LOC, Location
from fusecc.compiler.ir import Block, Operation, Value
from fusecc.compiler.types import Type


class InsertionPoint:
    """A place in a block: before `anchor`, or at the end when anchor is None."""

    __slots__ = ("block", "anchor")

    def __init__(self, block: Block, anchor: Operation | None = None):
        self.block = block
        self.anchor = anchor

    @classmethod
    def at_end(cls, block: Block) -> "InsertionPoint":
        return cls(block, None)

    @classmethod
    def at_start(cls, block: Block) -> "InsertionPoint":
        return cls(block, block.first_op)

    @classmethod
    def before(cls, op: Operation) -> "InsertionPoint":
        return cls(op.parent, op)

    @classmethod
    def after(cls, op: Operation) -> "InsertionPoint":
        return cls(op.parent, op.next_op)

    def insert(self, op: Operation) -> Operation:
        if self.anchor is None:
            return self.block.append(op)
        return self.block.insert_before(op, self.anchor)


class Builder:
    """Creates ops and inserts them; new ops get `location` unless told otherwise."""

    def __init__(self, insertion_point: InsertionPoint | None = None, location: Location = UNKNOWN_LOC):
        self.insertion_point = insertion_point
        self.location = location

    def set_insertion_point(self, point: InsertionPoint) -> None:
        self.insertion_point = point

    def insert(self, op: Operation) -> Operation:
        if self.insertion_point is None:
            raise ValueError("builder has no insertion point")
        return self.insertion_point.insert(op)

    def create(
        self,
        op_class: type[Operation],
        operands: Sequence[Value] = (),
        attributes: dict[str, Any] | None = None,
        result_types: Sequence[Type] | None = None,
        regions=None,
        location: Location | None = None,
    ) -> Operation:
        op = op_class.create(operands, attributes, result_types, regions, location or self.location)
        return self.insert(op)
