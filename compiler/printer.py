"""Printer for the textual IR: the custom form by default, the generic form
on request, locations with `debuginfo`.

SSA names: a value keeps the name it was written with (`%x`), made unique
within its function; other values are numbered `%0, %1, ...` and block
arguments `%arg0, ...` in order of definition, as MLIR does.
"""

from __future__ import annotations

import re

from fusecc.compiler import attributes as A
from fusecc.compiler.dim_binding import printed_attributes
from fusecc.compiler.ir import Block, Operation, Region, Value
from fusecc.compiler.traits import SymbolTable
from fusecc.compiler.types import FunctionType, format_result_types


_SSA_NAME = re.compile(r"[A-Za-z0-9_.$\-]+")


def _usable_hint(hint: str | None) -> bool:
    """A hint prints as itself only if it reads back as the same name: a
    valid SSA identifier that is not a bare number (numbers are positional)."""
    return bool(hint) and _SSA_NAME.fullmatch(hint) is not None and not hint.isdigit()


class _Names:
    """SSA names of one function (or other isolated op)."""

    def __init__(self):
        self.names: dict[Value, str] = {}
        self.taken: set[str] = set()
        self.next_number = 0
        self.next_arg = 0
        self.next_suffix: dict[str, int] = {}

    def _claim(self, base: str) -> str:
        name = base
        while name in self.taken:
            # One counter per base keeps many equal hints linear, not quadratic.
            suffix = self.next_suffix.get(base, 1)
            self.next_suffix[base] = suffix + 1
            name = f"{base}_{suffix}"
        self.taken.add(name)
        return name

    def _anonymous(self, prefix: str) -> str:
        while True:
            if prefix:
                name = f"{prefix}{self.next_arg}"
                self.next_arg += 1
            else:
                name = str(self.next_number)
                self.next_number += 1
            if name not in self.taken:
                self.taken.add(name)
                return name

    def define(self, value: Value, prefix: str = "") -> str:
        name = self._claim(value.name_hint) if _usable_hint(value.name_hint) else self._anonymous(prefix)
        self.names[value] = name
        return name

    def define_group(self, results) -> str:
        """One name for all results of an op: `%N:k`, used as `%N#i`."""
        first = results[0]
        name = self._claim(first.name_hint) if _usable_hint(first.name_hint) else self._anonymous("")
        for i, r in enumerate(results):
            self.names[r] = f"{name}#{i}"
        return name


class Printer:
    def __init__(self, generic: bool = False, debuginfo: bool = False, indent: str = "  ", digest_elements: bool = False):
        self.generic = generic
        self.debuginfo = debuginfo
        self.digest_elements = digest_elements
        self.indent_unit = indent
        self.lines: list[str] = []
        self.names = _Names()

    # --- values ------------------------------------------------------------
    def use(self, value: Value) -> str:
        name = self.names.names.get(value)
        if name is None:
            # Only invalid IR reaches here (a use outside the def's scope);
            # print something readable rather than failing.
            return "%<<UNKNOWN>>"
        return "%" + name

    def uses(self, values) -> str:
        return ", ".join(self.use(v) for v in values)

    def define_results(self, op: Operation) -> str:
        results = op.results
        if not results:
            return ""
        if len(results) == 1:
            return f"%{self.names.define(results[0])} = "
        hints = [r.name_hint for r in results]
        if all(_usable_hint(h) for h in hints) and len(set(hints)) == len(hints):
            return ", ".join("%" + self.names.define(r) for r in results) + " = "
        return f"%{self.names.define_group(results)}:{len(results)} = "

    # --- attributes --------------------------------------------------------
    def attr_dict(self, attributes: dict[str, A.Attribute], skip=()) -> str:
        entries = []
        for key, value in attributes.items():
            if key in skip:
                continue
            # A dotted bare key would read as an op name inside '{', so
            # dotted unit attributes keep an explicit value.
            if isinstance(value, A.UnitAttr) and "." not in key:
                entries.append(key)
            elif self.digest_elements and _large_inline_elements(value):
                entries.append(f"{key} = dense<#{_content_digest(value.array)}> : {value.type}")
            else:
                entries.append(f"{key} = {value}")
        return "{" + ", ".join(entries) + "}" if entries else ""

    def location(self, op: Operation) -> str:
        if not self.debuginfo:
            return ""
        return f" {op.location}"

    # --- ops ---------------------------------------------------------------
    def print_op(self, op: Operation, depth: int) -> None:
        # Each top-level symbol (a function) numbers its values from zero;
        # nested isolated ops continue their parent's numbering so that
        # names never repeat within a function.
        parent = op.parent_op
        if parent is not None and parent.has_trait(SymbolTable):
            saved, self.names = self.names, _Names()
        else:
            saved = None
        try:
            if self.generic:
                self.print_generic(op, depth)
            else:
                custom = getattr(self, "print_" + op.name.replace(".", "_"), None)
                if custom is not None:
                    custom(op, depth)
                else:
                    self.print_custom(op, depth)
        finally:
            if saved is not None:
                self.names = saved

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(self.indent_unit * depth + text)

    def print_custom(self, op: Operation, depth: int) -> None:
        head = self.define_results(op) + op.name
        skip = ()
        if op.custom_symbol is not None and op.custom_symbol in op.attributes:
            symbol = op.attributes[op.custom_symbol]
            head += f" @{symbol.value}"
            if op.operands or isinstance(symbol, A.SymbolRefAttr):
                head += f"({self.uses(op.operands)})"
            skip = (op.custom_symbol,)
        elif op.operands:
            head += " " + self.uses(op.operands)
        attrs = self.attr_dict(printed_attributes(op), skip)
        if attrs:
            head += " " + attrs
        if op.results:
            head += f" : ({', '.join(str(v.type) for v in op.operands)}) -> {format_result_types(op.result_types)}"
        elif op.operands:
            head += " : " + ", ".join(str(v.type) for v in op.operands)
        self.print_with_regions(op, head, depth, separator=" ")

    def print_with_regions(self, op: Operation, head: str, depth: int, separator: str, tail: str = "") -> None:
        if not op.regions:
            self.emit(depth, head + tail + self.location(op))
            return
        self.emit(depth, head + separator + "{")
        for i, region in enumerate(op.regions):
            if i:
                self.emit(depth, "}, {" if separator == "(" else "} {")
            self.print_region_body(region, depth + 1, show_entry_label=True)
        self.emit(depth, "}" + (")" if separator == "(" else "") + tail + self.location(op))

    def print_region_body(self, region: Region, depth: int, show_entry_label: bool) -> None:
        for index, block in enumerate(region.blocks):
            if index or (show_entry_label and block.args):
                self.print_block_label(block, index, depth - 1)
            for op in block:
                self.print_op(op, depth)

    def print_block_label(self, block: Block, index: int, depth: int) -> None:
        args = ", ".join(f"%{self.names.define(a, 'arg')}: {a.type}" for a in block.args)
        self.emit(depth, f"^bb{index}" + (f"({args})" if args else "") + ":")

    def print_generic(self, op: Operation, depth: int) -> None:
        head = f'{self.define_results(op)}"{op.name}"({self.uses(op.operands)})'
        attrs = self.attr_dict(printed_attributes(op))
        ftype = f"{FunctionType([v.type for v in op.operands], op.result_types)}"
        if not op.regions:
            self.emit(depth, f"{head}{' ' + attrs if attrs else ''} : {ftype}{self.location(op)}")
            return
        tail = f"{' ' + attrs if attrs else ''} : {ftype}"
        self.print_with_regions(op, head + " ", depth, separator="(", tail=tail)

    # --- ops with their own syntax -------------------------------------------
    def print_builtin_module(self, op: Operation, depth: int) -> None:
        head = "module"
        if "sym_name" in op.attributes:
            head += f" @{op.attr('sym_name')}"
        attrs = self.attr_dict(op.attributes, ("sym_name",))
        if attrs:
            head += " attributes " + attrs
        self.emit(depth, head + " {")
        for child in op.body:
            self.print_op(child, depth + 1)
        self.emit(depth, "}" + self.location(op))

    def print_func_func(self, op: Operation, depth: int) -> None:
        ftype = op.attr("function_type")
        block = op.body
        args = ", ".join(f"%{self.names.define(a, 'arg')}: {a.type}" for a in block.args)
        head = f"func.func @{op.attr('sym_name')}({args})"
        if ftype.results:
            head += f" -> {format_result_types(ftype.results)}"
        attrs = self.attr_dict(op.attributes, ("sym_name", "function_type"))
        if attrs:
            head += " attributes " + attrs
        self.emit(depth, head + " {")
        for index, extra in enumerate(op.regions[0].blocks):
            if index:
                self.print_block_label(extra, index, depth)
            for child in extra:
                self.print_op(child, depth + 1)
        self.emit(depth, "}" + self.location(op))


def _large_inline_elements(value: A.Attribute) -> bool:
    return isinstance(value, A.DenseElementsAttr) and not isinstance(value, A.DenseResourceElementsAttr) and value.array.size > A.DenseElementsAttr.HEX_THRESHOLD


def _content_digest(array) -> str:
    import hashlib

    import numpy as np

    return hashlib.blake2b(memoryview(np.ascontiguousarray(array)).cast("B"), digest_size=16).hexdigest()


def print_op(op: Operation, generic: bool = False, debuginfo: bool = False, digest_elements: bool = False) -> str:
    """Text of `op` (usually a module), ending with a newline. With
    `digest_elements`, large inline constants print as a digest of their
    bytes instead of their elements (`dense<#…>`, not parseable): a key that
    identifies the module at a fraction of the cost (a model's weights as
    hex are tens of MB)."""
    printer = Printer(generic=generic, debuginfo=debuginfo, digest_elements=digest_elements)
    printer.print_op(op, 0)
    return "\n".join(printer.lines) + "\n"
