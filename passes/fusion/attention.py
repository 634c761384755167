"""Attention fusion (seed 2.2 and 5.1).

Two steps. `raise_attention` rewrites the op-by-op chain

    s = matmul(q, kᵀ)            kᵀ as transpose_b, or a transpose of k
    s = s * c   |  s / c         optional, c a splat constant: the scale
    s = s + mask                 optional additive mask
    p = softmax(s)               tensor.softmax over the last axis, or
                                 max / sub / exp / sum / div written out
    o = matmul(p, v)

into one `tensor.attention` when every intermediate is used only by the
next link (otherwise the S×T scores must be materialised anyway).
`plan_attention` then makes each `tensor.attention` an `attention` cluster
together with the layout (injective) ops that split heads on its inputs and
merge heads on its output, so that the lowering can stream K and V through
shared memory and never write the scores.
"""

from __future__ import annotations

from fusecc.compiler.diagnostics import fuse_locations
from fusecc.compiler.ir import Block, Operation, Value, VerifyError
from fusecc.compiler.traits import Contraction, Injective
from fusecc.dialects import tensor as T

from fusecc.passes.fusion import cost_model as cm
from fusecc.passes.fusion.log import FusionLog
from fusecc.passes.fusion.partition import FORBID, FORCE, Partition, flag
from fusecc.passes.tiling.attention_tiles import choose_attention_tiles, gpu_attention_resources
from fusecc.passes.tiling.contraction_shapes import AttentionShape, resource_problem
from fusecc.passes.tiling.epilogues import epilogue_refusal
from fusecc.passes.transforms.decompose import decompose_op


def _single_user(value: Value) -> Operation | None:
    users = value.users
    return users[0] if len(users) == 1 and value.num_uses == 1 else None


def _last_axis_reduction(op: Operation | None, name: str, x: Value) -> bool:
    return (
        op is not None
        and op.name == name
        and op.operands[0] is x
        and op.normalized_axes == [x.type.rank - 1]
        and op.attr("keepdims")
    )


def match_softmax(p: Value) -> tuple[Value, list[Operation]] | None:
    """The input of a softmax over the last axis that produces `p`, and its ops.

    Accepts `tensor.softmax` and the written-out forms
    `exp(x - max(x)) / sum(exp(x - max(x)))` and `exp(x) / sum(exp(x))`
    (reductions with keepdims)."""
    op = p.defining_op
    if op is None:
        return None
    if op.name == "tensor.softmax":
        x = op.operands[0]
        return (x, [op]) if op.attr("axis") % x.type.rank == x.type.rank - 1 else None
    if op.name != "tensor.div":
        return None
    e, z = op.operands
    exp = e.defining_op
    total = z.defining_op
    if exp is None or exp.name != "tensor.exp" or not _last_axis_reduction(total, "tensor.reduce_sum", e):
        return None
    if set(e.users) != {total, op} or z.num_uses != 1:
        return None
    shifted = exp.operands[0]
    sub = shifted.defining_op
    if sub is not None and sub.name == "tensor.sub" and _single_user(shifted) is exp:
        x, m = sub.operands
        peak = m.defining_op
        if _last_axis_reduction(peak, "tensor.reduce_max", x) and m.num_uses == 1 and set(x.users) == {peak, sub}:
            return x, [peak, sub, exp, total, op]
    return shifted, [exp, total, op]


def _swap_last_two(rank: int) -> list[int]:
    return [*range(rank - 2), rank - 1, rank - 2]


def _transposed(value: Value, before: Operation, created: list[Operation]) -> Value:
    """`value` with its last two axes swapped, reusing a transpose when it has one."""
    rank = value.type.rank
    producer = value.defining_op
    if producer is not None and producer.name == "tensor.transpose":
        perm = producer.attr("perm")
        composed = [perm[i] for i in _swap_last_two(rank)]
        if composed == list(range(rank)):
            return producer.operands[0]
        new = T.TransposeOp.create([producer.operands[0]], {"perm": composed}, location=producer.location)
    else:
        new = T.TransposeOp.create([value], {"perm": _swap_last_two(rank)}, location=before.location)
    before.parent.insert_before(new, before)
    created.append(new)
    return new.result


def _splat_value(value: Value) -> float | None:
    op = value.defining_op
    if op is None or op.name != "tensor.constant" or not op.attr("value").is_splat:
        return None
    return float(op.attr("value").splat_value())


class _Chain:
    """One matched chain, before it is rewritten."""

    def __init__(self):
        self.ops: list[Operation] = []  # softmax ops, then links, then the scores matmul
        self.links: list[Operation] = []  # mask add and scale ops, from the softmax upward
        self.scale = 1.0
        self.mask: Value | None = None


def _scale_link(op: Operation | None) -> tuple[Value, float] | None:
    """(scaled value, factor) for `x * c`, `c * x` or `x / c` with c a splat."""
    if op is None or op.name not in ("tensor.mul", "tensor.div"):
        return None
    a, b = op.operands
    shape = op.result.type.shape
    if _splat_value(b) not in (None, 0.0) and a.type.shape == shape:
        return a, (1.0 / _splat_value(b) if op.name == "tensor.div" else _splat_value(b))
    if op.name == "tensor.mul" and _splat_value(a) is not None and b.type.shape == shape:
        return b, _splat_value(a)
    return None


def _below_scales(value: Value) -> Operation | None:
    """The op under a run of scale links (the scores matmul, for a chain)."""
    op = value.defining_op
    while (link := _scale_link(op)) is not None:
        op = link[0].defining_op
    return op


def _is_contraction(op: Operation | None) -> bool:
    return op is not None and op.has_trait(Contraction)


def _match(out: Operation, log: FusionLog) -> tuple[_Chain | None, str | None, Operation | None]:
    """(chain, None) for a raisable chain ending at `out`; (None, reason, op)
    for a chain that was recognised but cannot be raised; (None, None, None)
    when `out` does not end an attention chain at all."""
    if not out.has_trait(Contraction) or out.attr("transpose_a") or out.result.type.rank < 2:
        return None, None, None
    softmax = match_softmax(out.operands[0])
    if softmax is None:
        return None, None, None
    chain = _Chain()
    current, softmax_ops = softmax
    links: list[Operation] = []
    add = current.defining_op
    if add is not None and add.name == "tensor.add":
        a, b = add.operands
        shape = add.result.type.shape
        sides = [(main, mask) for main, mask in ((a, b), (b, a)) if main.type.shape == shape and _is_contraction(_below_scales(main))]
        if len(sides) != 1:
            return None, None, None
        current, chain.mask = sides[0]
        links.append(add)
    while (link := _scale_link(current.defining_op)) is not None:
        links.append(current.defining_op)
        current, factor = link
        chain.scale *= factor
    scores = current.defining_op
    if not _is_contraction(scores) or scores.attr("transpose_a") or scores.result.type.rank < 2:
        return None, None, None
    chain.ops = [*softmax_ops, *links, scores]
    chain.links = links
    fed = set(softmax_ops)
    for op in (scores, *links):
        value = op.results[0]
        if value is softmax[0] and all(u in fed for u in value.users):
            continue
        if value.num_uses != 1:
            return None, f"{log.name(op)} is also used outside the chain, so the scores are materialised anyway", op
    if out.operands[0].num_uses != 1:
        return None, "the probabilities are also used outside the chain", softmax_ops[-1]
    for op in (*chain.ops, out):
        if flag(op, FORBID):
            return None, "fusion.forbid is set on it", op
    return chain, None, None


def raise_attention(block: Block, log: FusionLog, protected: set[Operation]) -> list[Operation]:
    """Rewrite every raisable op-by-op attention chain in `block`; returns the
    new `tensor.attention` ops."""
    raised = []
    for out in [op for op in block if op.has_trait(Contraction)]:
        if out.parent is None or out in protected:
            continue
        chain, reason, culprit = _match(out, log)
        if chain is None:
            if reason is not None:
                log.refuse(culprit, out, f"not raised into tensor.attention: {reason}")
            continue
        if any(op in protected for op in chain.ops):
            continue
        attention = _rewrite(out, chain, log)
        if attention is not None:
            raised.append(attention)
    return raised


def _rewrite(out: Operation, chain: _Chain, log: FusionLog) -> Operation | None:
    scores = chain.ops[-1]
    created: list[Operation] = []
    q = scores.operands[0]
    k = scores.operands[1] if scores.attr("transpose_b") else _transposed(scores.operands[1], out, created)
    v = _transposed(out.operands[1], out, created) if out.attr("transpose_b") else out.operands[1]
    operands = [q, k, v] + ([chain.mask] if chain.mask is not None else [])
    try:
        # The chain's nodes (scores, scale, mask, softmax, output matmul) all
        # become this op: its location names each, for remarks and errors.
        location = fuse_locations([op.location for op in (*reversed(chain.ops), out)])
        attention = T.AttentionOp.create(operands, {"scale": float(chain.scale)}, location=location)
    except VerifyError as exc:
        attention = None
        why = str(exc)
    if attention is None or attention.result.type is not out.result.type:
        for op in reversed(created):
            op.erase()
        log.refuse(out, scores, "not raised into tensor.attention: " + (why if attention is None else "its shapes differ from the chain's"))
        return None
    hardware = log.hardware
    fused = cm.estimate_ops([*created, attention], hardware, "attention", outputs=[attention.result])
    parts = [cm.estimate_ops([op], hardware) for op in (*reversed(chain.ops), out)]
    forced = any(flag(op, FORCE) for op in (*chain.ops, out))
    limit = cm.check_limits(fused, hardware) or template_refusal(attention, hardware)
    if limit is not None and not forced:
        for op in reversed(created):
            op.erase()
        log.refuse(out, scores, f"not raised into tensor.attention: {limit}")
        return None
    out.parent.insert_before(attention, out)
    out.result.replace_all_uses_with(attention.result)
    saved = sum(p.bytes_moved for p in parts) - fused.bytes_moved
    for op in chain.ops:
        log.note(op.location, f"raised into tensor.attention in {{group}}: the {op.name} result never reaches memory", attention)
    log.note(attention.location, f"attention chain of {len(chain.ops) + 1} ops raised into one tensor.attention in {{group}}: saves {cm.format_bytes(saved)} of memory traffic", attention)
    log.created.update([attention, *created])
    softmax_count = len(chain.ops) - len(chain.links) - 1
    for op in [out, *reversed(chain.ops[:softmax_count]), *chain.links, chain.ops[-1]]:
        _erase_if_dead(op, log, attention)
    return attention


def _erase_if_dead(op: Operation, log: FusionLog, attention: Operation) -> None:
    if op.parent is None or any(r.has_uses() for r in op.results):
        return
    producers = [v.defining_op for v in op.operands]
    op.erase()
    for producer in producers:
        if producer is not None and producer.name == "tensor.transpose" and not any(r.has_uses() for r in producer.results):
            log.note(producer.location, "folded into the key or value operand of the tensor.attention in {group}", attention)
            _erase_if_dead(producer, log, attention)


# --------------------------------------------------------------------------- the template's limits


def template_refusal(attention: Operation, hardware) -> str | None:
    """Why the attention template cannot hold `attention` on `hardware`, or
    None: the lowering's own check (`check_gpu_attention_tiles`) on the tiles
    the tiler will choose. On a GPU every tile keeps the whole head dim of a
    q and a k tile in shared memory, so a long head dim (D = 8192: 512 KiB)
    fits no tile; a CPU streams the keys through its cache and always can."""
    if not hardware.is_gpu:
        return None
    problem = cm.at_hints(AttentionShape.of_op(attention))  # dynamic dims at their --shape-hint sizes
    return resource_problem(gpu_attention_resources(choose_attention_tiles(problem, hardware), problem), hardware, "attention")


def decompose_unfit_attention(block: Block, log: FusionLog, protected: set[Operation]) -> None:
    """Rewrite each `tensor.attention` the template cannot hold into its
    formula (matmul, softmax, matmul: `decompose`), which the matmul and
    reduction templates then fuse; fusion never forms a group its lowering
    refuses."""
    for op in [op for op in block if op.name == "tensor.attention" and op not in protected]:
        reason = template_refusal(op, log.hardware)
        if reason is not None:
            log.note(op.location, f"tensor.attention decomposed into matmul, softmax and matmul: {reason}")
            decompose_op(op)


# --------------------------------------------------------------------------- planning


def plan_attention(partition: Partition) -> None:
    """An `attention` cluster per `tensor.attention`, with its head split and
    merge (the layout ops its template can apply: `tiling.epilogues`)."""
    for op in partition.ops():
        if op.name != "tensor.attention" or not partition.free(op):
            continue
        cluster = partition.new_cluster([op], "attention")
        if flag(op, FORBID):
            continue
        for index in range(op.num_operands):
            _absorb_layout_chain(partition, cluster, op, index)
        current = op
        while True:
            user = current.results[0].users[0] if current.results[0].num_uses == 1 else None
            if user is None or not partition.free(user) or not user.has_trait(Injective) or flag(user, FORBID):
                break
            if epilogue_refusal(user, [current.results[0]], "attention") is not None:
                break  # a slice, concat or broadcast of the result: the template cannot apply it per element
            partition.add(cluster, [user])
            current = user


def _absorb_layout_chain(partition: Partition, cluster, consumer: Operation, index: int) -> None:
    """Pull the layout ops computing operand `index` of `consumer` into the
    cluster; one also used elsewhere is duplicated (it only moves indices)."""
    value = consumer.operands[index]
    producer = value.defining_op
    if producer is None or not partition.free(producer) or not producer.has_trait(Injective) or flag(producer, FORBID):
        return
    if producer.name == "tensor.broadcast_to":
        return  # the lowering broadcasts an operand itself; keep reads small
    if any(partition.cluster_of.get(u) is not cluster for u in value.users):
        clone = partition.duplicate(producer)
        consumer.set_operand(index, clone.results[0])
        producer = clone
    partition.add(cluster, [producer])
    for i in range(producer.num_operands):
        _absorb_layout_chain(partition, cluster, producer, i)
