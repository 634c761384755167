"""cse: merge pure ops that compute the same thing.

Two ops are the same when they have the same name, operands, attributes,
result types and (for ops with regions) structurally identical bodies; the
later one is replaced by the earlier one, which dominates it because blocks
are single and ordered. Commutative ops compare their first two operands
unordered, so `add %a, %b` and `add %b, %a` merge.

Each op is hashed by such a key into a scoped table, so a run is linear in
program size. Scopes follow regions: a region's ops see the enclosing
scopes' ops unless the region's op is IsolatedFromAbove (a `fusion.group`
or a function), whose body starts a fresh scope. Bodies are CSE'd before
their op is keyed, so two `fusion.group`s merge exactly when they have the
same inputs and attributes (their `id`s too) and their bodies are the same
op for op after CSE.

Only pure ops without a terminator role are merged; `func.call` is not pure.
"""

from __future__ import annotations

import struct
from collections import ChainMap
from dataclasses import dataclass

from fusecc.compiler import attributes as A
from fusecc.compiler.ir import Block, Operation, Value
from fusecc.compiler.pass_manager import Pass, PassContext
from fusecc.compiler.traits import Commutative, IsolatedFromAbove, Pure, Terminator


class ExactAttribute:
    """An attribute compared bit for bit: `==` on floats and dense elements
    says 0.0 == -0.0, which must not merge ops."""

    __slots__ = ("attr", "bits")

    def __init__(self, attr: A.Attribute):
        self.attr = attr
        self.bits = None

    def _bits(self) -> bytes:
        if self.bits is None:
            a = self.attr
            self.bits = a.array.tobytes() if isinstance(a, A.DenseElementsAttr) else struct.pack("<d", a.value)
        return self.bits

    def __hash__(self) -> int:
        return hash(self.attr)

    def __eq__(self, other) -> bool:
        if not isinstance(other, ExactAttribute):
            return False
        a, b = self.attr, other.attr
        return a is b or (type(a) is type(b) and a.type is b.type and self._bits() == other._bits())


def attribute_key(attributes: dict[str, A.Attribute]) -> tuple:
    return tuple(
        sorted(
            ((name, ExactAttribute(value) if isinstance(value, (A.DenseElementsAttr, A.FloatAttr)) else value) for name, value in attributes.items()),
            key=lambda item: item[0],
        )
    )


class _Keys:
    """Keys of ops. Inside a body being keyed, values defined in the body are
    numbered in order of definition, so equal bodies give equal keys."""

    def __init__(self):
        self.local: dict[Value, int] = {}

    def ref(self, value: Value):
        return self.local.get(value, value)

    def op_key(self, op: Operation) -> tuple:
        operands = [self.ref(v) for v in op.operands]
        if op.has_trait(Commutative) and len(operands) >= 2 and _order(operands[1]) < _order(operands[0]):
            operands[0], operands[1] = operands[1], operands[0]
        key = (op.name, tuple(operands), attribute_key(op.attributes), tuple(op.result_types))
        if op.regions:
            key += tuple(self.region_key(region) for region in op.regions)
        return key

    def region_key(self, region) -> tuple:
        blocks = []
        for block in region.blocks:
            for arg in block.args:
                self.local[arg] = len(self.local)
            ops = []
            for inner in block:
                ops.append(self.op_key(inner))
                for result in inner.results:
                    self.local[result] = len(self.local)
            blocks.append((tuple(a.type for a in block.args), tuple(ops)))
        return tuple(blocks)


def _order(item) -> tuple:
    """A total order over operand references (body numbers, then values)."""
    return (0, item) if isinstance(item, int) else (1, id(item))


def mergeable(op: Operation) -> bool:
    return op.has_trait(Pure) and not op.has_trait(Terminator) and bool(op.results)


def cse_block(block: Block, scope: ChainMap) -> int:
    """CSE `block` (and nested regions) with `scope` visible; returns ops removed."""
    removed = 0
    for op in block:
        for region in op.regions:
            inner = ChainMap() if op.has_trait(IsolatedFromAbove) else scope.new_child()
            for nested in region.blocks:
                removed += cse_block(nested, inner.new_child())
        if not mergeable(op):
            continue
        key = _Keys().op_key(op)
        existing = scope.get(key)
        if existing is None:
            scope[key] = op
            continue
        for old, new in zip(op.results, existing.results):
            old.replace_all_uses_with(new)
        op.erase()
        removed += 1
    return removed


@dataclass(frozen=True)
class CSE(Pass):
    name = "cse"
    summary = "Merge pure ops with equal operands, attributes and bodies"

    def run(self, op: Operation, context: PassContext) -> None:
        removed = 0
        for region in op.regions:
            for block in region.blocks:
                removed += cse_block(block, ChainMap())
        context.statistics["cse.removed"] = context.statistics.get("cse.removed", 0) + removed
