"""A checker for the contract `fuse` promises the lowerings (see `fuse.py`).

`contract_problems(module)` lists every way a fused module breaks the
contract; the fusion tests run it on everything they fuse, and a lowering
can assert it on its input.
"""

from __future__ import annotations

from fusecc.compiler.ir import Operation
from fusecc.compiler.traits import ConstantLike, Contraction, Elementwise, Injective, Reduction
from fusecc.dialects.fusion import GroupOp

from fusecc.passes.fusion import cost_model as cm
from fusecc.passes.tiling.epilogues import epilogue_refusal
from fusecc.passes.tiling.parts import horizontal_parts
from fusecc.passes.fusion.partition import PARTS, is_fusable
from fusecc.passes.fusion.reduction import RowSpace, row_space


def contract_problems(module: Operation) -> list[str]:
    problems: list[str] = []
    expected_id = 0
    for func in [op for op in module.body if op.name == "func.func"]:
        for op in func.body:
            if isinstance(op, GroupOp):
                if op.attr("id") != expected_id:
                    problems.append(f"group ids are not dense in program order: found {op.attr('id')}, expected {expected_id}")
                expected_id += 1
                problems.extend(f"group {op.attr('id')} ({op.attr('kind')}): {p}" for p in group_problems(op))
            elif is_fusable(op):
                problems.append(f"{op.name} at {op.location} is outside every group")
    return problems


def group_problems(group: GroupOp) -> list[str]:
    kind = group.attr("kind")
    for op in group.body_ops():
        if op.has_trait(ConstantLike) and not op.attr("value").is_splat:
            return ["a non-splat constant is cloned into the body"]
    ops = [op for op in group.body_ops() if not op.has_trait(ConstantLike)]
    if kind == "horizontal":
        parts = horizontal_parts(group)
        out = [] if len(parts) > 1 else ["a horizontal group needs at least two parts"]
        declared = group.attributes.get(PARTS)
        if declared is None or len(declared.elements) != len(parts):
            out.append("fusion.parts does not list one kind per part")
        for part_kind, part_ops in parts:
            out.extend(f"part {part_kind}: {p}" for p in kind_problems(part_kind, part_ops))
        return out
    return kind_problems(kind, ops)


def kind_problems(kind: str, ops: list[Operation]) -> list[str]:
    if not ops:
        return ["the group computes nothing"]
    if kind in ("opaque", "injective"):
        if len(ops) != 1:
            return [f"an {kind} group holds {len(ops)} ops"]
        return [] if kind == "opaque" or ops[0].has_trait(Injective) else [f"{ops[0].name} is not a layout op"]
    if kind == "elementwise":
        return [f"{op.name} is not elementwise" for op in ops if not (op.has_trait(Elementwise) or op.has_trait(Injective))]
    if kind == "attention":
        attention = [op for op in ops if op.name == "tensor.attention"]
        out = [] if len(attention) == 1 else [f"{len(attention)} tensor.attention ops"]
        epilogue = _dependents(ops, set(attention))
        for op in ops:
            if op in attention:
                continue
            if not op.has_trait(Injective):
                out.append(f"{op.name} is not a layout op")
            elif op in epilogue:
                refusal = epilogue_refusal(op, [v for v in op.operands if v.defining_op in epilogue], "attention")
                out += [refusal] if refusal else []
        return out
    if kind == "matmul":
        return _matmul_problems(ops)
    if kind == "reduction":
        return _reduction_problems(ops)
    return [f"unknown kind {kind}"]


def _dependents(ops: list[Operation], roots: set[Operation]) -> set[Operation]:
    """Ops of `ops` (in order) that depend on a root, roots included."""
    found = set(roots)
    for op in ops:
        if any(v.defining_op in found for v in op.operands):
            found.add(op)
    return found


def _matmul_problems(ops: list[Operation]) -> list[str]:
    matmuls = [op for op in ops if op.has_trait(Contraction)]
    if len(matmuls) != 1:
        return [f"{len(matmuls)} matmuls"]
    matmul = matmuls[0]
    epilogue = _dependents(ops, {matmul})
    out = []
    for op in ops:
        if op is matmul:
            continue
        if op in epilogue:
            if not op.has_trait(Elementwise):
                out.append(f"epilogue op {op.name} is not elementwise")
            elif op.results[0].type.shape != matmul.result.type.shape:
                out.append(f"epilogue op {op.name} changes the shape")
        elif not (op.has_trait(Injective) or (op.has_trait(Elementwise) and cm.is_cheap(op))):
            out.append(f"prologue op {op.name} is neither a layout op nor cheap")
    return out


def _reduction_problems(ops: list[Operation]) -> list[str]:
    reducers = [op for op in ops if op.has_trait(Reduction) or cm.is_row_composite(op)]
    if not reducers:
        return ["no reduction"]
    found = row_space(reducers[0])
    if found is None:
        return [] if len(ops) == 1 else [f"{reducers[0].name} is not row-wise but has company"]
    space = RowSpace(*found)
    out = [f"{op.name} reduces other rows" for op in reducers if not space.same_rows(op)]
    after = _dependents(ops, set(reducers))
    for op in ops:
        if op in reducers:
            continue
        if not (op.has_trait(Elementwise) or op.has_trait(Injective)):
            out.append(f"{op.name} is neither elementwise nor a reduction")
        elif op in after and not space.contains(op.results[0].type.shape):
            out.append(f"epilogue op {op.name} leaves the rows")
    return out
