"""SSA values: results of operations and arguments of blocks, each with its
use list (the (op, operand index) pairs that read it, in insertion order).

`Operation` and `Block` appear in annotations only: `ir` and `blocks` import
this module, never the reverse.
"""

from __future__ import annotations

from typing import Callable

from fusecc.compiler.types import Type


class Value:
    """An SSA value. `uses` maps (op, operand index) pairs in insertion order."""

    __slots__ = ("type", "_uses", "name_hint")

    def __init__(self, type: Type, name_hint: str | None = None):
        self.type = type
        self._uses: dict[tuple[Operation, int], None] = {}
        self.name_hint = name_hint

    @property
    def uses(self) -> list[tuple["Operation", int]]:
        return list(self._uses)

    @property
    def users(self) -> list["Operation"]:
        """Ops using this value, each once, in first-use order."""
        return list(dict.fromkeys(op for op, _ in self._uses))

    @property
    def num_uses(self) -> int:
        return len(self._uses)

    def has_uses(self) -> bool:
        return bool(self._uses)

    def has_one_use(self) -> bool:
        return len(self._uses) == 1

    def replace_all_uses_with(self, new: "Value") -> None:
        if new is self:
            return
        for op, index in list(self._uses):
            op.set_operand(index, new)

    def replace_uses_where(self, new: "Value", predicate: Callable[["Operation"], bool]) -> None:
        for op, index in list(self._uses):
            if predicate(op):
                op.set_operand(index, new)

    @property
    def owner(self):
        raise NotImplementedError

    @property
    def defining_op(self) -> "Operation | None":
        return None


class OpResult(Value):
    __slots__ = ("op", "index")

    def __init__(self, type: Type, op: "Operation", index: int):
        super().__init__(type)
        self.op = op
        self.index = index

    @property
    def owner(self) -> "Operation":
        return self.op

    @property
    def defining_op(self) -> "Operation":
        return self.op

    @property
    def parent_block(self) -> "Block | None":
        return self.op.parent

    def __repr__(self) -> str:
        return f"<result {self.index} of {self.op.name}: {self.type}>"


class BlockArgument(Value):
    __slots__ = ("block", "index")

    def __init__(self, type: Type, block: "Block", index: int, name_hint: str | None = None):
        super().__init__(type, name_hint)
        self.block = block
        self.index = index

    @property
    def owner(self) -> "Block":
        return self.block

    @property
    def parent_block(self) -> "Block":
        return self.block

    def __repr__(self) -> str:
        return f"<block argument {self.index}: {self.type}>"
