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
from fusecc.compiler.traits import Contraction, Elementwise, Injective

from . import cost_model as cm
from .partition import Cluster, Partition


def matmul_of(cluster: Cluster) -> Operation:
    return next(op for op in cluster.ops if op.has_trait(Contraction))


def admit_epilogue(cluster: Cluster, op: Operation) -> str | None:
    shape = matmul_of(cluster).result.type.shape
    if not op.has_trait(Elementwise):
        return f"{op.name} is not an elementwise epilogue"
    if op.results[0].type.shape != shape:
        return f"{op.name} changes the shape of the matmul result"
    return None


def admit_prologue(cluster: Cluster, op: Operation) -> str | None:
    if not (op.has_trait(Injective) or (op.has_trait(Elementwise) and cm.is_cheap(op))):
        return f"{op.name} is too expensive to recompute per tile"
    if cm.numel(op.results[0]) > sum(cm.numel(v) for v in op.operands):
        return f"{op.name} would re-read its input per output element"
    return None


def plan_matmul(partition: Partition) -> None:
    for op in partition.ops():
        if not op.has_trait(Contraction) or not partition.free(op):
            continue
        cluster = partition.new_cluster([op], "matmul")
        partition.absorb_producers(cluster, admit_prologue)
        partition.grow(cluster, admit_epilogue, quick=lambda c, user: True)
        partition.absorb_producers(cluster, admit_prologue)  # side inputs of the epilogue
