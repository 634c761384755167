"""Reduction fusion: row-wise reductions with their prologue and epilogue.

A reduction over the trailing axes of its input, or a normalising composite
(softmax over the last axis, layernorm, rmsnorm), seeds a `reduction`
cluster with a row space: the input's full shape `R + I`, where `I` are the
reduced trailing axes. The cluster then takes

* as prologue, elementwise and layout producers used only by it (so
  `x * x` joins the mean of squares), and sibling reductions over the same
  rows (`E[x²] − E[x]²`);
* as epilogue, its users in program order while they stay in the row space:
  elementwise ops whose result is a full row (`R + I`) or a reduced one
  (`R + 1…1` or `R`), reshapes between reduced forms, `broadcast_to` of a
  reduced value back to full rows, further reductions and normalising
  composites over the same rows.

So softmax, layernorm and rmsnorm written op by op each become one group,
exactly like their composite ops: one block per row (or per few rows) that
reads the row once, keeps what the epilogue needs in registers or shared
memory, and writes the result once.
"""

from __future__ import annotations

from fusecc.compiler.dims import hinted
from fusecc.compiler.ir import Operation
from fusecc.compiler.traits import Elementwise, Injective, Reduction

from fusecc.passes.fusion import cost_model as cm
from fusecc.passes.fusion.partition import Cluster, Partition


def row_space(op: Operation) -> tuple[tuple[int, ...], int] | None:
    """(full shape, number of reduced trailing axes) when `op` works on rows."""
    if op.has_trait(Reduction):
        shape = op.operands[0].type.shape
        axes = op.normalized_axes
        k = len(axes)
        if k == 0 or axes != list(range(len(shape) - k, len(shape))):
            return None
        return shape, k
    if cm.is_row_composite(op):
        shape = op.operands[0].type.shape
        if op.name == "tensor.softmax" and op.attr("axis") % len(shape) != len(shape) - 1:
            return None
        return shape, 1
    return None


class RowSpace:
    def __init__(self, full: tuple[int, ...], k: int):
        self.full = full
        self.k = k
        rows = full[: len(full) - k]
        self.kept = rows + (1,) * k  # reduced with keepdims
        self.flat = rows  # reduced without keepdims

    def contains(self, shape) -> bool:
        return shape in (self.full, self.kept, self.flat)

    def reduced(self, shape) -> bool:
        return shape in (self.kept, self.flat)

    def same_rows(self, op: Operation) -> bool:
        found = row_space(op)
        return found is not None and found[0] == self.full and found[1] == self.k


class ReductionPlanner:
    def __init__(self, partition: Partition):
        self.partition = partition

    def admit_prologue(self, cluster: Cluster, op: Operation) -> str | None:
        space = cluster.space
        if op.has_trait(Reduction) or cm.is_row_composite(op):
            return None if space.same_rows(op) else f"{op.name} reduces different rows"
        if not (op.has_trait(Elementwise) or op.has_trait(Injective)):
            return f"{op.name} is not elementwise"
        if cm.numel(op.results[0]) > hinted(_numel(space.full)):  # dynamic dims at their --shape-hint sizes
            return f"{op.name} is larger than the rows"
        return None

    def admit_epilogue(self, cluster: Cluster, op: Operation) -> str | None:
        space = cluster.space
        shape = op.results[0].type.shape if op.results else None
        if op.has_trait(Reduction) or cm.is_row_composite(op):
            return None if space.same_rows(op) else f"{op.name} reduces different rows"
        if op.has_trait(Elementwise):
            return None if space.contains(shape) else f"{op.name} leaves the rows of the reduction"
        if op.has_trait(Injective):
            source = op.operands[0].type.shape
            if op.name == "tensor.reshape" and space.reduced(source) and space.reduced(shape):
                return None
            if op.name == "tensor.broadcast_to" and space.reduced(source) and shape == space.full:
                return None
            return f"{op.name} changes the row layout"
        return f"{op.name} cannot join a row-wise reduction"

    def run(self) -> None:
        p = self.partition
        for op in p.ops():
            found = row_space(op)
            if found is None or not p.free(op):
                continue
            cluster = p.new_cluster([op], "reduction")
            cluster.space = RowSpace(*found)
            p.absorb_producers(cluster, self.admit_prologue)
            p.grow(cluster, self.admit_epilogue)
            p.absorb_producers(cluster, self.admit_prologue)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def plan_reductions(partition: Partition) -> None:
    ReductionPlanner(partition).run()
