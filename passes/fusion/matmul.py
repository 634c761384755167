"""Matmul epilogue fusion (seed 2.1 and 4.2).

Each `tensor.matmul` (any Contraction) seeds a `matmul` cluster. Its users
join, in program order, while they are elementwise ops over the matmul's
result shape — bias, scale, activation, residual add, cast — so the tiled
kernel applies them to the accumulator tile before the single store. Side
inputs (bias vectors, residuals) are read per tile.

Producers of the matmul's operands (and of the epilogue's side inputs) join
as a prologue when they are used only here and are cheap: layout ops
(transpose, concatenated sibling weights) and elementwise ops of at most one
flop per element that read each input element once. The tiled kernel
re-evaluates a prologue for every tile that loads it; the cost model counts
that recomputation, so an expensive producer stays in its own kernel.
"""

from __future__ import annotations

from fusecc.compiler.ir import Operation
from fusecc.compiler.traits import Contraction, Elementwise, Injective, Reduction

from fusecc.passes.fusion import cost_model as cm
from fusecc.passes.fusion.partition import Cluster, Partition


def matmul_of(cluster: Cluster) -> Operation:
    return next(op for op in cluster.ops if op.has_trait(Contraction))


def admit_epilogue(cluster: Cluster, op: Operation) -> str | None:
    shape = matmul_of(cluster).result.type.shape
    if not op.has_trait(Elementwise):
        return f"{op.name} is not an elementwise epilogue"
    if op.results[0].type.shape != shape:
        return f"{op.name} changes the shape of the matmul result"
    if _better_as_reduction_prologue(cluster, op):
        return f"{op.name} only feeds a reduction, whose group reads its input anyway"
    return None


def _better_as_reduction_prologue(cluster: Cluster, op: Operation) -> bool:
    """An op whose results only feed reductions (the `x * x` of an rmsnorm),
    reading group values that are written anyway: in the matmul's epilogue
    it would add a store and a load; in the reduction's prologue it is free."""
    users = [u for r in op.results for u in r.users]
    if not users or not all(u.has_trait(Reduction) or cm.is_row_composite(u) for u in users):
        return False
    members = set(cluster.ops)
    reads = [v for v in op.operands if v.defining_op in members]
    return all(any(u is not op for u in v.users) for v in reads)


def admit_prologue(cluster: Cluster, op: Operation) -> str | None:
    if not (op.has_trait(Injective) or (op.has_trait(Elementwise) and cm.is_cheap(op))):
        return f"{op.name} is too expensive to recompute per tile"
    if cm.numel(op.results[0]) > sum(cm.numel(v) for v in op.operands):
        return f"{op.name} would re-read its input per output element"
    return None


def admit_layout_prologue(cluster: Cluster, op: Operation) -> str | None:
    if not op.has_trait(Injective):
        return f"{op.name} is left for elementwise fusion first"
    return admit_prologue(cluster, op)


def plan_matmul(partition: Partition) -> None:
    """Matmul clusters with their epilogues and layout prologues. Elementwise
    prologues are settled by `merge_prologues` after elementwise fusion, so
    that a chain feeding a matmul first gets the chance to fuse whole (an
    rmsnorm's scaling, a gated activation) rather than be cut in two."""
    for op in partition.ops():
        if not op.has_trait(Contraction) or not partition.free(op):
            continue
        cluster = partition.new_cluster([op], "matmul")
        partition.absorb_producers(cluster, admit_layout_prologue)
        partition.grow(cluster, admit_epilogue, quick=lambda c, user: True)
        partition.absorb_producers(cluster, admit_layout_prologue)  # side inputs of the epilogue


def merge_prologues(partition: Partition) -> None:
    """Cheap elementwise producers read only by a matmul group join it as its
    prologue: free ops one by one, and whole elementwise clusters."""
    for cluster in [c for c in partition.clusters if c.kind == "matmul" and not c.fixed]:
        partition.absorb_producers(cluster, admit_prologue)
        producers: dict[Cluster, None] = {}
        for op in cluster.ops:
            for v in op.operands:
                owner = partition.cluster_of.get(v.defining_op)
                if owner is not None and owner is not cluster and owner.kind in ("elementwise", "injective") and not owner.fixed:
                    producers[owner] = None
        for producer in producers:
            if producer.dead or cluster.dead:
                continue
            ops = partition.sorted_ops(producer)
            if any(u not in cluster.ops for u in partition.users_outside(ops, set(ops))):
                continue
            if any(admit_prologue(cluster, op) is not None for op in ops):
                partner = next(u for u in partition.users_outside(ops, set(ops)))
                reason = next(admit_prologue(cluster, op) for op in ops if admit_prologue(cluster, op) is not None)
                partition.log.refuse(ops[-1], partner, reason)
                continue
            partner = partition.users_outside(ops, set(ops))[0]
            if partition.merge(cluster, producer, partner):
                pass
