"""Sibling matmuls that share an input become one matmul (seed 2.2, 5.1).

    q = x @ Wq + bq;  k = x @ Wk + bk;  v = x @ Wv + bv
becomes
    qkv = x @ concat(Wq, Wk, Wv) + concat(bq, bk, bv)
    q, k, v = slices of qkv

Siblings are matmuls with the same left operand, transposes and
contraction size. The longest epilogue prefix they share (the same
elementwise ops in the same order, whose other operands are per-column
vectors, concatenated, or one shared splat) is merged too. What follows
the prefix reads its slice.

The cost model decides (`cost_model.sibling_merge_saving`): merging saves
launches and re-reads of the shared input, but a sibling whose own
epilogue (what follows the prefix) would have fused into its matmul now
reads its slice back from memory. The merged matmul itself costs what the
separate ones do because the lowering reads the concatenated weights piece
by piece; more siblings than it specialises are not merged
(`cost_model.sibling_merge_refusal`). So Q/K/V projections merge; SwiGLU's gate
and up projections merge when their outputs are small (decoding), and stay
apart with their gated epilogue when they are large.
"""

from __future__ import annotations

from fusecc.compiler.ir import Block, Operation, Value
from fusecc.compiler.traits import Contraction, Elementwise, Terminator
from fusecc.dialects import tensor as T

from fusecc.passes.fusion import cost_model as cm
from fusecc.passes.fusion.log import FusionLog
from fusecc.passes.fusion.partition import FORBID, FORCE, flag


def _is_column(value: Value, width: int, rank: int) -> bool:
    shape = value.type.shape
    return len(shape) <= rank and len(shape) >= 1 and shape[-1] == width and all(d == 1 for d in shape[:-1])


def _splat(value: Value):
    op = value.defining_op
    if op is None or op.name != "tensor.constant" or not op.attr("value").is_splat:
        return None
    return (value.type, op.attr("value").splat_value())


def _epilogue_chain(mm: Operation) -> list[Operation]:
    """Single-use elementwise ops after `mm` that keep its shape."""
    chain = []
    current = mm.result
    while current.num_uses == 1:
        user = current.users[0]
        if not user.has_trait(Elementwise) or user.results[0].type.shape != current.type.shape or flag(user, FORBID):
            break
        chain.append(user)
        current = user.results[0]
    return chain


def _same_step(ops: list[Operation], previous: list[Value], widths: list[int], rank: int) -> bool:
    """Whether the i-th epilogue ops of all siblings can be merged into one."""
    first = ops[0]
    for op, prev in zip(ops, previous):
        if op.name != first.name or op.attributes != first.attributes or op.num_operands != first.num_operands:
            return False
        if [v is prev for v in op.operands] != [v is previous[0] for v in first.operands]:
            return False
        if op.results[0].type.element_type is not first.results[0].type.element_type:
            return False
    for index, value in enumerate(first.operands):
        if value is previous[0]:
            continue
        sides = [op.operands[index] for op in ops]
        if all(s is sides[0] for s in sides) and (sides[0].type.rank == 0 or all(d == 1 for d in sides[0].type.shape)):
            continue
        splats = [_splat(s) for s in sides]
        if splats[0] is not None and all(s == splats[0] for s in splats):
            continue
        if all(_is_column(s, w, rank) for s, w in zip(sides, widths)) and len({s.type.rank for s in sides}) == 1:
            continue
        return False
    return True


def merge_sibling_matmuls(block: Block, log: FusionLog, protected: set[Operation]) -> None:
    position = {op: i for i, op in enumerate(block)}
    sets: dict[tuple, list[Operation]] = {}
    for op in block:
        if not op.has_trait(Contraction) or op in protected or flag(op, FORBID):
            continue
        lhs, rhs = op.operands
        if rhs.type.rank < 2 or op.result.type.rank < 2:
            continue
        transpose_b = bool(op.attr("transpose_b"))
        contracted = rhs.type.shape[-1] if transpose_b else rhs.type.shape[-2]
        key = (lhs, bool(op.attr("transpose_a")), transpose_b, rhs.type.shape[:-2], contracted, rhs.type.element_type, op.result.type.shape[:-1])
        sets.setdefault(key, []).append(op)
    for siblings in sets.values():
        if len(siblings) > 1:
            _merge(block, siblings, position, log)


def _merge(block: Block, siblings: list[Operation], position: dict[Operation, int], log: FusionLog) -> None:
    rank = siblings[0].result.type.rank
    widths = [mm.result.type.shape[-1] for mm in siblings]
    chains = [_epilogue_chain(mm) for mm in siblings]
    prefix = 0
    previous = [mm.result for mm in siblings]
    while all(len(c) > prefix for c in chains):
        step = [c[prefix] for c in chains]
        if not _same_step(step, previous, widths, rank):
            break
        previous = [op.results[0] for op in step]
        prefix += 1
    finals = previous
    users = [u for v in finals for u in v.users]
    if not all(v.has_uses() for v in finals):
        return  # dead siblings are for dce, not for merging
    anchor = min(users, key=lambda u: position.get(u, len(position)))
    limit = position.get(anchor, len(position))
    inputs = [siblings[0].operands[0], *(mm.operands[1] for mm in siblings)]
    for chain, mm in zip(chains, siblings):
        running = mm.result
        for op in chain[:prefix]:
            inputs.extend(v for v in op.operands if v is not running)
            running = op.results[0]
    for value in inputs:
        producer = value.defining_op
        if producer is not None and producer.parent is block and position.get(producer, 0) >= limit:
            return  # an input is computed after a sibling is already used
    hw = log.hardware
    lhs_bytes = cm.byte_size(siblings[0].operands[0])
    # A sibling's own epilogue (after the shared prefix) would have fused
    # into its matmul; merged, it reads its slice back from memory. A result
    # the function returns is written by its matmul; merged, its slice is
    # copied out of the merged result: the same extra write and read.
    reread = sum(cm.byte_size(v) for v in finals if any(u.has_trait(Elementwise) or u.has_trait(Terminator) for u in v.users))
    saved = cm.sibling_merge_saving(len(siblings), lhs_bytes, reread, hw)
    forced = any(flag(op, FORCE) for op in siblings)
    names = ", ".join(log.name(mm) for mm in siblings)
    refusal = cm.sibling_merge_refusal(len(siblings))
    if any(type(w) is not int for w in widths):  # the pieces would start at sums of `?` dims
        refusal = "their widths are '?' dims"
        forced = False
    if refusal is not None and not forced:
        for mm in siblings[1:]:
            log.refuse(mm, siblings[0], f"not merged with its sibling matmuls ({names}): {refusal}")
        return
    if saved <= 0 and not forced:
        for mm in siblings[1:]:
            log.refuse(mm, siblings[0], f"not merged with its sibling matmuls ({names}): their epilogues would read the merged result back (est. {cm.format_time(-saved)} slower)")
        return
    _rewrite(block, siblings, chains, prefix, widths, anchor, log, saved, names)


def _rewrite(block, siblings, chains, prefix, widths, anchor, log: FusionLog, saved: float, names: str) -> None:
    first = siblings[0]
    rank = first.result.type.rank
    transpose_b = bool(first.attr("transpose_b"))
    rhs_axis = first.operands[1].type.rank - (2 if transpose_b else 1)
    created: list[Operation] = []

    def emit(op: Operation) -> Operation:
        block.insert_before(op, anchor)
        created.append(op)
        return op

    weights = emit(T.ConcatOp.create([mm.operands[1] for mm in siblings], {"axis": rhs_axis}, location=first.location))
    attributes = {k: v for k, v in first.attributes.items() if k in ("transpose_a", "transpose_b")}
    current = emit(T.MatmulOp.create([first.operands[0], weights.result], attributes, location=first.location)).result
    for step in range(prefix):
        ops = [chain[step] for chain in chains]
        template = ops[0]
        previous = template.operands
        operands = []
        for index, value in enumerate(previous):
            if value is (chains[0][step - 1].results[0] if step else siblings[0].result):
                operands.append(current)
                continue
            sides = [op.operands[index] for op in ops]
            if sides[0].type.rank and sides[0].type.shape[-1] != 1:
                # One value per sibling's columns (a bias; one shared bias or
                # splat too): the merged op reads them side by side.
                concat = emit(T.ConcatOp.create(sides, {"axis": sides[0].type.rank - 1}, location=template.location))
                operands.append(concat.result)
            else:
                operands.append(sides[0])  # broadcasts along the columns: one shared value serves all
        result_type = current.type.with_element_type(template.results[0].type.element_type)
        current = emit(type(template).create(operands, dict(template.attributes), [result_type], location=template.location)).result
    offset = 0
    shape = current.type.shape
    finals = [chain[prefix - 1].results[0] if prefix else mm.result for chain, mm in zip(chains, siblings)]
    for final, width in zip(finals, widths):
        start = [0] * (rank - 1) + [offset]
        stop = [d if type(d) is int else T.TO_THE_END for d in shape[:-1]] + [offset + width]  # a dynamic dim: all of it
        piece = emit(T.SliceOp.create([current], {"start": start, "stop": stop}, location=final.defining_op.location))
        final.replace_all_uses_with(piece.result)
        offset += width
    matmul = created[1]
    log.created.update(created)
    for mm, chain in zip(siblings, chains):
        for op in reversed(chain[:prefix]):
            op.erase()
        log.note(mm.location, f"merged with its siblings ({names}) into one matmul on concatenated weights in {{group}}: saves est. {cm.format_time(saved)}", matmul)
        mm.erase()

