"""Horizontal fusion (seed 2.3): independent kernels of one kind and shape
share a launch.

Clusters are bucketed by their depth in the graph of clusters (the longest
chain of clusters feeding them), their kind and their shape signature.
Two clusters at the same depth cannot depend on each other, and merging
within a depth keeps every edge going to a greater depth, so no merge here
can create a cycle. Within a bucket, clusters merge in program order while
the cost model accepts (each merge saves a launch and re-reads of shared
inputs; the op count and the hungriest part's registers and shared memory
must stay within the limits).

The result is a `horizontal` group whose parts are the merged clusters;
`fusion.parts` records each part's kind (see `tiling/parts.py`). Four LayerNorms
over same-shape inputs become one launch this way. Sibling matmuls that
share an input are merged earlier, into one matmul on concatenated weights
(`siblings.py`).
"""

from __future__ import annotations

from fusecc.compiler.traits import Contraction

from fusecc.passes.fusion import cost_model as cm
from fusecc.passes.fusion.partition import FORBID, Cluster, Partition, flag
from fusecc.passes.fusion.reduction import row_space

KINDS = ("elementwise", "reduction", "matmul", "attention")


def signature(partition: Partition, cluster: Cluster):
    ops = partition.sorted_ops(cluster)
    if cluster.kind == "reduction":
        for op in ops:
            found = row_space(op)
            if found is not None:
                return found[0], op.operands[0].type.element_type
        return op.name, tuple(v.type for v in ops[0].operands), tuple(ops[0].result_types)
    if cluster.kind == "matmul":
        mm = next(op for op in ops if op.has_trait(Contraction))
        return tuple(v.type for v in mm.operands), mm.result.type
    if cluster.kind == "attention":
        att = next(op for op in ops if op.name == "tensor.attention")
        return tuple(v.type for v in att.operands), att.result.type
    outputs = cm.escaping_results(ops, set(ops))
    return tuple(sorted(str(v.type) for v in outputs))


def plan_horizontal(partition: Partition) -> None:
    for op in partition.ops():
        if partition.free(op):
            partition.new_cluster([op])
    depth = partition.depths()
    buckets: dict[tuple, list[Cluster]] = {}
    for cluster in partition.clusters:
        kind = "elementwise" if cluster.kind == "injective" else cluster.kind
        if kind not in KINDS or cluster.fixed or any(flag(op, FORBID) for op in cluster.ops):
            continue
        key = (depth.get(cluster, 0), kind, signature(partition, cluster))
        buckets.setdefault(key, []).append(cluster)
    for members in buckets.values():
        if len(members) > 1:
            _merge_bucket(partition, sorted(members, key=lambda c: c.last))


def _merge_bucket(partition: Partition, members: list[Cluster]) -> None:
    hw = partition.hardware
    current = members[0]
    current_cost = partition.cost(current)
    parts = [(current.kind, list(current.ops))]
    for other in members[1:]:
        other_cost = partition.cost(other)
        shared = _shared_input_bytes(partition, [*current.ops], other.ops)
        merged = cm.combine_horizontal([current_cost, other_cost], hw, shared_input_bytes=shared)
        decision = cm.decide([current_cost, other_cost], merged, hw)
        first = partition.sorted_ops(other)[0]
        partner = partition.sorted_ops(current)[0]
        if not decision.fuse:
            partition.log.refuse(first, partner, f"not merged horizontally: {decision.reason}")
            current, current_cost, parts = other, other_cost, [(other.kind, list(other.ops))]
            continue
        parts.append((other.kind, list(other.ops)))
        if current.kind != "horizontal":
            combined = partition.new_cluster([*current.ops, *other.ops], "horizontal")
            partition.remove(current)
        else:
            combined = current
            partition.add(combined, other.ops)
        partition.remove(other)
        combined.parts = parts
        combined.kind = "horizontal"
        combined._cost = merged
        current, current_cost = combined, merged


def _shared_input_bytes(partition: Partition, a_ops, b_ops) -> int:
    a = set(cm.external_inputs(a_ops, set(a_ops)))
    b = cm.external_inputs(b_ops, set(b_ops))
    return sum(cm.byte_size(v) for v in b if v in a and not cm.is_free_input(v))

