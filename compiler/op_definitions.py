"""How ops are declared: named operand, result and attribute definitions,
the attribute kinds the verifier checks, the registry the parser looks op
names up in, and the properties (`op.lhs`, `op.axes`) generated from the
declarations.

    @register_op
    class AddOp(Operation):
        name = "tensor.add"
        operand_defs = (OperandDef("lhs"), OperandDef("rhs"))
        result_defs = (ResultDef("result"),)

`Operation` (ir.py) appears in annotations only: it imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from fusecc.compiler import attributes as A


@dataclass(frozen=True)
class OperandDef:
    """A named operand; `variadic` takes zero or more, `optional` zero or one."""

    name: str
    variadic: bool = False
    optional: bool = False


@dataclass(frozen=True)
class ResultDef:
    name: str
    variadic: bool = False


@dataclass(frozen=True)
class AttrDef:
    """A declared attribute.

    `kind` is checked by the verifier; `default` is what the accessor returns
    when the attribute is absent (`REQUIRED` makes absence an error);
    `choices` restricts string values.
    """

    name: str
    kind: "AttrKind"
    default: Any = None
    choices: tuple = ()
    doc: str = ""


REQUIRED = object()


class AttrKind:
    """How to check an attribute and turn it into a Python value."""

    def __init__(self, label: str, check: Callable[[A.Attribute], bool], to_python: Callable[[A.Attribute], Any] = lambda a: a.value):
        self.label = label
        self.check = check
        self.to_python = to_python

    def __repr__(self) -> str:
        return self.label


def _is_int(a):
    return isinstance(a, A.IntegerAttr)


INT = AttrKind("integer", _is_int)
FLOAT = AttrKind("float", lambda a: isinstance(a, (A.FloatAttr, A.IntegerAttr)), lambda a: float(a.value))
BOOL = AttrKind("bool", lambda a: isinstance(a, (A.BoolAttr, A.UnitAttr)))
STRING = AttrKind("string", lambda a: isinstance(a, A.StringAttr))
INT_ARRAY = AttrKind(
    "array of integers",
    lambda a: isinstance(a, A.ArrayAttr) and all(isinstance(e, A.IntegerAttr) for e in a.elements),
    lambda a: [e.value for e in a.elements],
)
STRING_ARRAY = AttrKind(
    "array of strings",
    lambda a: isinstance(a, A.ArrayAttr) and all(isinstance(e, A.StringAttr) for e in a.elements),
    lambda a: [e.value for e in a.elements],
)
DENSE = AttrKind("dense elements", lambda a: isinstance(a, A.DenseElementsAttr), lambda a: a)
TYPE = AttrKind("type", lambda a: isinstance(a, A.TypeAttr))
SYMBOL = AttrKind("symbol reference", lambda a: isinstance(a, A.SymbolRefAttr))
ANY = AttrKind("attribute", lambda a: True, lambda a: a)


OP_REGISTRY: dict[str, type["Operation"]] = {}


def register_op(cls: type["Operation"]) -> type["Operation"]:
    if cls.name in OP_REGISTRY and OP_REGISTRY[cls.name] is not cls:
        raise ValueError(f"operation {cls.name} registered twice")
    OP_REGISTRY[cls.name] = cls
    return cls


def lookup_op_class(name: str) -> type["Operation"] | None:
    return OP_REGISTRY.get(name)


# --------------------------------------------------------------------------- accessors and operand counts


def install_accessors(cls: type[Operation], base: type[Operation]) -> None:
    """Named properties for declared operands, results and attributes.

    A name the class defines itself, or one the `base` class already uses
    (`name`, `body`, `result`, ...), is left alone."""

    def free(name: str) -> bool:
        return name not in cls.__dict__ and not hasattr(base, name)

    for index, definition in enumerate(cls.operand_defs):
        if free(definition.name):
            setattr(cls, definition.name, property(_operand_getter(cls, index)))
    for index, definition in enumerate(cls.result_defs):
        if free(definition.name):
            setattr(cls, definition.name, property(_result_getter(cls, index)))
    for definition in cls.attr_defs:
        if free(definition.name):
            setattr(cls, definition.name, property(lambda self, _n=definition.name: self.attr(_n)))


def _group_ranges(defs: Sequence, count: int) -> list[tuple[int, int]]:
    """Split `count` actual values among declared groups (at most one variadic
    or optional group takes what the fixed ones leave)."""
    fixed = sum(1 for d in defs if not (d.variadic or getattr(d, "optional", False)))
    flexible = count - fixed
    ranges, position = [], 0
    for d in defs:
        size = flexible if (d.variadic or getattr(d, "optional", False)) else 1
        ranges.append((position, position + size))
        position += size
    return ranges


def _operand_getter(cls, index):
    definition = cls.operand_defs[index]
    simple = all(not (d.variadic or d.optional) for d in cls.operand_defs)

    if simple:
        return lambda self: self._operands[index]

    def get(self):
        start, stop = _group_ranges(cls.operand_defs, len(self._operands))[index]
        values = self._operands[start:stop]
        if definition.variadic:
            return values
        return values[0] if values else None

    return get


def _result_getter(cls, index):
    definition = cls.result_defs[index]
    if not any(d.variadic for d in cls.result_defs):
        return lambda self: self.results[index]

    def get(self):
        start, stop = _group_ranges(cls.result_defs, len(self.results))[index]
        values = self.results[start:stop]
        return values if definition.variadic else values[0]

    return get


def check_operand_count(cls: type[Operation], count: int) -> str | None:
    """An error message when `count` operands do not fit the declaration."""
    if cls._fixed_operand_count == count:
        return None
    defs = cls.operand_defs
    fixed = sum(1 for d in defs if not (d.variadic or d.optional))
    variadic = any(d.variadic for d in defs)
    optional = sum(1 for d in defs if d.optional)
    if variadic:
        if count < fixed:
            return f"expects at least {fixed} operand{'s' * (fixed != 1)}, but got {count}"
        return None
    if not fixed <= count <= fixed + optional:
        expected = str(fixed) if not optional else f"{fixed} or {fixed + optional}"
        return f"expects {expected} operand{'s' * (fixed + optional != 1)}, but got {count}"
    return None
