"""Symbol lookup: the op named `@name` in the nearest enclosing symbol table
(a module's functions, kernels)."""

from __future__ import annotations

from fusecc.compiler.ir import Operation
from fusecc.compiler.traits import Symbol, SymbolTable


def nearest_symbol_table(op: Operation) -> Operation | None:
    current = op.parent_op
    while current is not None and not current.has_trait(SymbolTable):
        current = current.parent_op
    return current


def lookup_symbol(from_op: Operation, name: str) -> Operation | None:
    """Find the op named `@name` in the symbol table enclosing `from_op`."""
    table = from_op if from_op.has_trait(SymbolTable) else nearest_symbol_table(from_op)
    while table is not None:
        for candidate in table.body:
            if candidate.has_trait(Symbol) and candidate.attr("sym_name") == name:
                return candidate
        table = nearest_symbol_table(table)
