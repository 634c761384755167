"""The `builtin` dialect: the module that holds a program's functions."""

from __future__ import annotations

from fusecc.compiler.diagnostics import error
from fusecc.compiler.ir import Block, Operation, Region
from fusecc.compiler.op_definitions import STRING, AttrDef, register_op
from fusecc.compiler.traits import IsolatedFromAbove, NoTerminator, Symbol, SymbolTable


@register_op
class ModuleOp(Operation):
    """`module { ... }`: a symbol table of functions; its block has no terminator."""

    name = "builtin.module"
    traits = frozenset({SymbolTable, IsolatedFromAbove, NoTerminator})
    attr_defs = (AttrDef("sym_name", STRING),)
    region_count = 1

    @classmethod
    def build(cls, ops=()) -> "ModuleOp":
        module = cls([], [], {}, [Region([Block()])])
        for op in ops:
            module.body.append(op)
        return module

    def verify_(self) -> None:
        seen: set[str] = set()
        for op in self.body:
            name = op.attributes.get("sym_name")
            if name is None or not op.has_trait(Symbol):
                continue
            if name.value in seen:
                raise error(op.location, f"redefinition of symbol @{name.value}")
            seen.add(name.value)

    def functions(self) -> list[Operation]:
        from fusecc.dialects.func import FuncOp

        return [op for op in self.body if isinstance(op, FuncOp)]

    def lookup(self, name: str) -> Operation | None:
        for op in self.body:
            if op.attributes.get("sym_name") is not None and op.attr("sym_name") == name:
                return op
        return None
