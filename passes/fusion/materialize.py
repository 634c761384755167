"""From a partition to `fusion.group` ops, and from groups in the input back
to clusters: each cluster becomes one group, placed in dependence order,
with its inputs as operands and the values used outside as results.
"""

from __future__ import annotations

from fusecc.compiler import attributes as A
from fusecc.compiler.diagnostics import fuse_locations
from fusecc.compiler.ir import Block, Operation, Region, Value
from fusecc.compiler.traits import ConstantLike, Terminator
from fusecc.dialects.fusion import GroupOp, YieldOp
from fusecc.passes.fusion import cost_model as cm
from fusecc.passes.fusion.partition import PARTS, Cluster, Partition, natural_kind, is_fusable, unit_graph
from fusecc.passes.tiling.parts import component_kinds


def flatten_groups(block: Block) -> list[tuple[str, list[Operation]]]:
    """Inline every top-level `fusion.group` back into `block`.

    Returns (kind, ops) for each former group so that it can be planned as a
    cluster and materialised again."""
    former = []
    for group in [op for op in block if isinstance(op, GroupOp)]:
        mapping: dict[Value, Value] = dict(zip(group.body.args, group.operands))
        ops = []
        for op in group.body_ops():
            clone = op.clone(mapping)
            block.insert_before(clone, group)
            if is_fusable(clone):
                ops.append(clone)
        for result, value in zip(group.results, group.yield_op.operands):
            result.replace_all_uses_with(mapping.get(value, value))
        group.erase()
        former.append((group.attr("kind"), ops))
    return former


def materialize(partition: Partition, group_everything: bool, first_id: int) -> list[GroupOp]:
    """Rebuild the block: constants first, then every chosen cluster as a
    `fusion.group` (and other ops as they are) in dependence order. With
    `group_everything`, every fusable op ends up in a group."""
    block = partition.block
    if group_everything:
        for op in partition.ops():
            if op not in partition.cluster_of:
                partition.new_cluster([op], natural_kind(op))
    chosen = {c for c in partition.clusters if group_everything or c.fixed or len(c.ops) > 1 or c.kind in ("attention", "horizontal")}
    order, _ = unit_graph(partition, chosen)
    terminator = block.last_op if block.last_op is not None and block.last_op.has_trait(Terminator) else None
    constants = [op for op in block if op.has_trait(ConstantLike)]
    for op in list(block):
        if op is not terminator:
            op.detach()
    for op in constants:
        _insert(block, op, terminator)
    groups = []
    for unit in order:
        if isinstance(unit, Cluster):
            group = _build_group(partition, unit, first_id + len(groups))
            groups.append(group)
            _insert(block, group, terminator)
        else:
            _insert(block, unit, terminator)
    for op in constants:
        if not any(r.has_uses() for r in op.results):
            op.erase()
    return groups


def _insert(block: Block, op: Operation, terminator: Operation | None) -> None:
    if terminator is None:
        block.append(op)
    else:
        block.insert_before(op, terminator)


def _build_group(partition: Partition, cluster: Cluster, group_id: int) -> GroupOp:
    ops = partition.sorted_ops(cluster)
    members = set(ops)
    body = Block()
    arguments: dict[Value, Value] = {}
    splats: dict[Value, Value] = {}
    for op in ops:
        body.append(op)
        for index, value in enumerate(op.operands):
            producer = value.defining_op
            if producer in members:
                continue
            if cm.is_splat_constant(value):
                local = splats.get(value)
                if local is None:
                    clone = producer.clone({})
                    if body.first_op is None:
                        body.append(clone)
                    else:
                        body.insert_before(clone, body.first_op)
                    local = splats[value] = clone.results[0]
            else:
                local = arguments.get(value)
                if local is None:
                    local = arguments[value] = body.add_argument(value.type)
            op.set_operand(index, local)
    outputs = [r for op in ops for r in op.results if any(user.parent is not body for user in r.users)]
    terminator = YieldOp.create(outputs, result_types=[])
    body.append(terminator)
    attributes: dict[str, A.Attribute] = {"kind": A.StringAttr(cluster.kind), "id": A.IntegerAttr(group_id)}
    if cluster.kind == "horizontal":
        attributes[PARTS] = A.ArrayAttr(tuple(A.StringAttr(k) for k in component_kinds(body)))
    group = GroupOp(list(arguments), [r.type for r in outputs], attributes, [Region([body])], fuse_locations(op.location for op in ops))
    for result, new in zip(outputs, group.results):
        result.replace_uses_where(new, lambda user: user.parent is not body)
    return group
