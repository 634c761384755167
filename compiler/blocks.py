"""Blocks and regions. A block keeps its ops in a doubly linked list so that
insertion and erasure are O(1) and passes stay linear in program size.

`Operation` (ir.py) appears in annotations only: it imports this module.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from fusecc.compiler.traits import Terminator
from fusecc.compiler.types import Type
from fusecc.compiler.values import BlockArgument, Value


class Block:
    """A list of ops with arguments. Ops are linked; iterate with `for op in block`."""

    __slots__ = ("args", "parent", "_first", "_last", "_size", "_order_valid")

    def __init__(self, arg_types: Iterable[Type] = ()):
        self.args: list[BlockArgument] = []
        self.parent: Region | None = None
        self._first: Operation | None = None
        self._last: Operation | None = None
        self._size = 0
        self._order_valid = True
        for t in arg_types:
            self.add_argument(t)

    def add_argument(self, type: Type, name_hint: str | None = None) -> BlockArgument:
        arg = BlockArgument(type, self, len(self.args), name_hint)
        self.args.append(arg)
        return arg

    def erase_argument(self, index: int) -> None:
        if self.args[index]._uses:
            raise ValueError("cannot erase a block argument that is still used")
        del self.args[index]
        for i, arg in enumerate(self.args):
            arg.index = i

    @property
    def parent_op(self) -> Operation | None:
        return self.parent.parent if self.parent else None

    def __iter__(self) -> Iterator[Operation]:
        op = self._first
        while op is not None:
            nxt = op._next
            yield op
            op = nxt

    def __reversed__(self) -> Iterator[Operation]:
        op = self._last
        while op is not None:
            prev = op._prev
            yield op
            op = prev

    def __len__(self) -> int:
        return self._size

    @property
    def ops(self) -> list[Operation]:
        return list(self)

    @property
    def first_op(self) -> Operation | None:
        return self._first

    @property
    def last_op(self) -> Operation | None:
        return self._last

    @property
    def terminator(self) -> Operation | None:
        last = self._last
        return last if last is not None and last.has_trait(Terminator) else None

    def _link(self, op: Operation, before: Operation | None) -> None:
        if op.parent is not None:
            raise ValueError(f"{op.name} is already in a block")
        op.parent = self
        if before is None:
            op._prev, op._next = self._last, None
            if self._last is not None:
                self._last._next = op
                op._order = self._last._order + 1
            else:
                self._first = op
                op._order = 0
            self._last = op
        else:
            if before.parent is not self:
                raise ValueError("insertion point is not in this block")
            op._prev, op._next = before._prev, before
            if before._prev is not None:
                before._prev._next = op
            else:
                self._first = op
            before._prev = op
            self._order_valid = False
        self._size += 1

    def _unlink(self, op: Operation) -> None:
        if op._prev is not None:
            op._prev._next = op._next
        else:
            self._first = op._next
        if op._next is not None:
            op._next._prev = op._prev
        else:
            self._last = op._prev
        op._prev = op._next = None
        op.parent = None
        self._size -= 1

    def _ensure_order(self) -> None:
        if not self._order_valid:
            for i, op in enumerate(self):
                op._order = i
            self._order_valid = True

    def append(self, op: Operation) -> Operation:
        self._link(op, None)
        return op

    def insert_before(self, op: Operation, anchor: Operation) -> Operation:
        self._link(op, anchor)
        return op

    def insert_after(self, op: Operation, anchor: Operation) -> Operation:
        self._link(op, anchor._next)
        return op

    def clone_into(self, region: "Region", value_map: dict[Value, Value]) -> "Block":
        new = Block()
        region.add_block(new)
        for arg in self.args:
            value_map[arg] = new.add_argument(arg.type, arg.name_hint)
        for op in self:
            new.append(op.clone(value_map))
        return new


class Region:
    __slots__ = ("blocks", "parent")

    def __init__(self, blocks: Iterable[Block] = ()):
        self.blocks: list[Block] = []
        self.parent: Operation | None = None
        for block in blocks:
            self.add_block(block)

    def add_block(self, block: Block) -> Block:
        block.parent = self
        self.blocks.append(block)
        return block

    @property
    def block(self) -> Block:
        """The region's only block, created on first access when empty."""
        if not self.blocks:
            self.add_block(Block())
        return self.blocks[0]

    def clone(self, value_map: dict[Value, Value]) -> "Region":
        new = Region()
        for block in self.blocks:
            block.clone_into(new, value_map)
        return new
