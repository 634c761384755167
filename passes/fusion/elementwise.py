"""Elementwise and layout (injective) producer→consumer fusion (seed 2.1).

In program order, every elementwise or layout op not yet in a cluster seeds
an `elementwise` cluster and absorbs its users while they are elementwise
or layout ops, including broadcasts and diamonds (a multi-use producer
whose users meet again). The lowering evaluates a group as index
expressions over each output's shape; a value read through a broadcast by a
larger consumer is recomputed per consumer element, which the cost model
charges, so an expensive producer feeding a broadcast stays separate unless
that pays.

Two more moves handle producers with users in several clusters, taken in
order of the time they save:

* duplication: a small producer (up to four ops) is copied into every
  consumer cluster when the copies, recomputation included, cost less than
  storing it once and loading it in each consumer;
* multi-output fusion: otherwise it joins the earliest consumer cluster
  that can take it (elementwise, or as a reduction prologue), which then
  also writes it for the later consumers.
"""

from __future__ import annotations

from fusecc.compiler.ir import Operation
from fusecc.compiler.traits import Injective, Terminator

from fusecc.passes.fusion import cost_model as cm
from fusecc.passes.fusion.matmul import admit_prologue
from fusecc.passes.fusion.partition import FORBID, Cluster, Partition, flag, is_elementwise_like

# Producers up to this size are candidates for duplication; the cost model
# decides whether the recomputation costs less than storing and reloading.
DUPLICATE_MAX_OPS = 4


def admit(cluster: Cluster, op: Operation) -> str | None:
    if not is_elementwise_like(op):
        return f"{op.name} is not elementwise"
    return None


def no_recompute(partition: Partition, cluster: Cluster, op: Operation) -> bool:
    """True when `op` reads cluster values at no more points than they have."""
    size = cm.numel(op.results[0])
    for v in op.operands:
        producer = v.defining_op
        if producer is not None and partition.cluster_of.get(producer) is cluster and cm.numel(v) < size:
            return False
    return op.name != "tensor.concat"


def plan_elementwise(partition: Partition) -> None:
    for op in partition.ops():
        if not is_elementwise_like(op) or not partition.free(op):
            continue
        cluster = partition.new_cluster([op])
        if flag(op, FORBID):
            continue
        partition.grow(cluster, admit, quick=lambda c, user: no_recompute(partition, c, user))
        partition.absorb_producers(cluster, admit)
    _share_producers(partition)


# --------------------------------------------------------------------------- multi-consumer producers


def _consumers(partition: Partition, cluster: Cluster) -> tuple[list[Cluster], bool]:
    """The other clusters reading `cluster`, and whether anything else does."""
    found: dict[Cluster, None] = {}
    other = False
    for op in cluster.ops:
        for r in op.results:
            for user in r.users:
                owner = partition.cluster_of.get(user)
                if owner is cluster:
                    continue
                if owner is None:
                    other = True
                else:
                    found[owner] = None
    return list(found), other


def _can_take(partition: Partition, consumer: Cluster, producer_ops: list[Operation]) -> bool:
    """Whether `consumer`'s kind admits the producer's ops as a prologue."""
    if consumer.fixed or consumer.kind in ("opaque", "horizontal"):
        return False
    if consumer.kind in ("elementwise", "injective"):
        return True
    if consumer.kind == "attention":
        return all(op.has_trait(Injective) and op.name != "tensor.broadcast_to" for op in producer_ops)
    if consumer.kind == "matmul":
        return all(admit_prologue(consumer, op) is None for op in producer_ops)
    if consumer.kind == "reduction":
        # A row-wise kernel evaluates its prologue at row indices, so what it
        # takes (and may also write) must be full rows.
        space = consumer.space
        return space is not None and all(
            is_elementwise_like(op) and all(r.type.shape == space.full for r in op.results) for op in producer_ops
        )
    return False


def _share_producers(partition: Partition) -> None:
    candidates = []
    for cluster in list(partition.clusters):
        if cluster.kind not in ("elementwise", "injective") or cluster.fixed:
            continue
        if any(flag(op, FORBID) for op in cluster.ops):
            continue
        consumers, other = _consumers(partition, cluster)
        if len(consumers) < 2 and not (consumers and other):
            continue
        candidates.append((cluster, consumers, other))
    decisions = []
    for cluster, consumers, other in candidates:
        best = _duplication(partition, cluster, consumers, other) or _multi_output(partition, cluster, consumers)
        if best is not None:
            decisions.append(best)
    for saved, _, apply in sorted(decisions, key=lambda d: (-d[0], d[1])):
        apply()


def _duplication(partition: Partition, producer: Cluster, consumers: list[Cluster], other: bool):
    ops = partition.sorted_ops(producer)
    if other or len(ops) > DUPLICATE_MAX_OPS:
        return None
    if not all(_can_take(partition, c, ops) for c in consumers):
        return None
    hw = partition.hardware
    separate = [partition.cost(producer)] + [partition.cost(c) for c in consumers]
    copies = []
    for consumer in consumers:
        merged = partition.sorted_ops(consumer) + ops
        merged.sort(key=partition.position.__getitem__)
        outputs = cm.escaping_results(partition.sorted_ops(consumer), set(consumer.ops))
        copies.append(cm.estimate_ops(merged, hw, consumer.kind, outputs=outputs))
    total = sum(c.time_seconds for c in copies)
    saved = sum(c.time_seconds for c in separate) - total
    limit = next((cm.check_limits(c, hw) for c in copies if cm.check_limits(c, hw)), None)
    if saved <= 0 or limit is not None:
        return None

    def apply():
        if producer.dead or len(producer.ops) != len(ops) or any(c.dead for c in consumers):
            return
        for consumer in consumers:
            _copy_into(partition, ops, consumer)
        for op in reversed(ops):
            if not any(r.has_uses() for r in op.results):
                del partition.cluster_of[op]
                op.erase()
        producer.ops = [op for op in producer.ops if op.parent is not None]
        if not producer.ops:
            partition.remove(producer)

    return saved, partition.position[ops[0]], apply


def _copy_into(partition: Partition, ops: list[Operation], consumer: Cluster) -> None:
    """Give `consumer` its own copies of `ops`, rewiring its reads to them."""
    mapping = {}
    copies = []
    for op in ops:
        clone = partition.duplicate(op)
        for index, value in enumerate(clone.operands):
            if value in mapping:
                clone.set_operand(index, mapping[value])
        for old, new in zip(op.results, clone.results):
            mapping[old] = new
        copies.append(clone)
    for member in consumer.ops:
        for index, value in enumerate(member.operands):
            if value in mapping:
                member.set_operand(index, mapping[value])
    partition.add(consumer, copies)


def _multi_output(partition: Partition, producer: Cluster, consumers: list[Cluster]):
    if not consumers:
        return None
    target = min(consumers, key=lambda c: c.last)
    ops = partition.sorted_ops(producer)
    if target.kind not in ("elementwise", "injective", "reduction") or not _can_take(partition, target, ops):
        return None
    # Every other reader must come after the target, so the merged group can
    # sit where the target is.
    for op in ops:
        for r in op.results:
            for user in r.users:
                owner = partition.cluster_of.get(user)
                if owner is producer or owner is target:
                    continue
                if user.has_trait(Terminator):
                    continue
                if partition.position.get(user, float("inf")) <= target.last:
                    return None
    hw = partition.hardware
    merged_ops = sorted([*producer.ops, *target.ops], key=partition.position.__getitem__)
    merged = cm.estimate_ops(merged_ops, hw, target.kind)
    decision = cm.decide([partition.cost(producer), partition.cost(target)], merged, hw)
    if not decision.fuse:
        partner = next((op for op in target.ops for v in op.operands if v.defining_op in producer.ops), target.ops[0])
        partition.log.refuse(ops[-1], partner, decision.reason)
        return None

    def apply():
        if producer.dead or target.dead or len(producer.ops) != len(ops):
            return
        partition.add(target, ops)
        partition.remove(producer)

    return decision.saved_seconds, partition.position[ops[0]], apply
