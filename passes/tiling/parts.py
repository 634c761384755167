"""Group kinds (`infer_kind`), and the parts of a `horizontal` group, for
the tiler, the cost model and the lowering.

A horizontal group runs independent sub-computations in one launch. Its
parts are the connected components of the body's dataflow (edges between
body ops; shared block arguments and constants do not connect parts),
ordered by their first op. The group's `fusion.parts` attribute lists each
part's kind in that order, so a lowering can dispatch every part to the
lowering of that kind and give each part its own range of blocks.
"""

from __future__ import annotations

from typing import Sequence

from fusecc.compiler.ir import Block, Operation
from fusecc.compiler.traits import Composite, ConstantLike, Contraction, Elementwise, Injective, Reduction


def infer_kind(ops: Sequence[Operation]) -> str:
    if any(op.name == "tensor.attention" for op in ops):
        return "attention"
    if any(op.has_trait(Contraction) for op in ops):
        return "matmul"
    if any(op.has_trait(Reduction) or op.has_trait(Composite) for op in ops):
        return "reduction"
    if len(ops) == 1 and ops[0].has_trait(Injective):
        return "injective"
    if all(op.has_trait(Elementwise) or op.has_trait(Injective) for op in ops):
        return "elementwise"
    return "opaque"


def components(ops: list[Operation]) -> list[list[Operation]]:
    """Connected components of `ops` (in order), by op-to-op dataflow."""
    parent = {op: op for op in ops}

    def find(op):
        while parent[op] is not op:
            parent[op] = parent[parent[op]]
            op = parent[op]
        return op

    for op in ops:
        for value in op.operands:
            producer = value.defining_op
            if producer in parent:
                a, b = find(op), find(producer)
                if a is not b:
                    parent[a] = b
    groups: dict[Operation, list[Operation]] = {}
    for op in ops:
        groups.setdefault(find(op), []).append(op)
    return list(groups.values())


def _computing(block: Block) -> list[Operation]:
    return [op for op in block if not op.has_trait(ConstantLike) and op is not block.last_op]


def component_kinds(body: Block) -> list[str]:
    return [infer_kind(ops) for ops in components(_computing(body))]


def horizontal_parts(group: Operation) -> list[tuple[str, list[Operation]]]:
    """(kind, ops) of each part of a horizontal group, in body order."""
    parts = components(_computing(group.body))
    kinds = group.attributes.get("fusion.parts")
    names = [e.value for e in kinds.elements] if kinds is not None else []
    if len(names) != len(parts):
        names = [infer_kind(ops) for ops in parts]
    return list(zip(names, parts))
