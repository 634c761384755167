"""The op translation table: one `Rule` per ONNX op type.

A rule says which attributes it understands (any other is refused before
translation starts, with every other unsupported node), how to fold the node
when all its inputs are known (numpy, in `folding.py`) and how to translate
it to tensor-dialect ops (`ops_*.py`). Ops without a translation only fold:
their inputs must be constants or shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

TABLE: dict[str, "Rule"] = {}


@dataclass
class Rule:
    op_type: str
    attrs: frozenset[str] = frozenset()
    translate: Callable | None = None
    fold: Callable | None = None
    # check(node) -> reason or None: refusals that depend on attribute values
    # or on which optional outputs are used, found before translation.
    check: Callable | None = None
    # Shape and Size fold from a runtime input's static shape.
    folds_from_shapes: bool = False
    # Inputs that must be known at import time (axes, target shapes, bounds).
    constant_inputs: tuple[int, ...] = ()

    def needs_constant(self, index: int) -> bool:
        return index in self.constant_inputs or (self.translate is None and not self.folds_from_shapes)


def rule(op_type: str, attrs: tuple[str, ...] = ()) -> Rule:
    found = TABLE.get(op_type)
    if found is None:
        found = TABLE[op_type] = Rule(op_type, frozenset(attrs))
    else:
        found.attrs |= frozenset(attrs)
    return found


def translation(*op_types: str, attrs: tuple[str, ...] = (), check: Callable | None = None, constant_inputs: tuple[int, ...] = ()):
    """Decorator: `fn(cx, node, args) -> outputs` translates these op types."""

    def register(fn):
        for op_type in op_types:
            entry = rule(op_type, attrs)
            entry.translate = fn
            entry.constant_inputs = constant_inputs
            if check is not None:
                entry.check = check
        return fn

    return register


def folder(*op_types: str, attrs: tuple[str, ...] = (), from_shapes: bool = False):
    """Decorator: `fn(cx, node, arrays) -> outputs` folds these op types."""

    def register(fn):
        for op_type in op_types:
            entry = rule(op_type, attrs)
            entry.fold = fn
            entry.folds_from_shapes = from_shapes
        return fn

    return register
