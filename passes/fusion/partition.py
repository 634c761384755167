"""The planning state every fusion phase works on.

A `Partition` divides the fusable tensor ops of one function block into
clusters; each cluster becomes one `fusion.group` (one kernel) when the
partition is materialised. Phases only ever grow clusters in ways that keep
the partition legal (every group can be placed in the block without a
cycle):

* a cluster may absorb a producer whose users are all inside it (prologue);
* a cluster may absorb its users one at a time in program order, stopping at
  the first one it refuses (`grow`). Then every user outside a cluster comes
  after the cluster's last op, so clusters ordered by their last op are in
  dependence order and no merge of this kind can close a cycle;
* horizontal merges (independent clusters) happen last, between clusters at
  the same depth of the cluster graph, which cannot depend on each other.

Every refusal is logged with its reason (`log.py`); `materialize.py` turns
the final partition into groups.
"""

from __future__ import annotations

import heapq
from typing import Callable, Iterable

from fusecc.compiler import attributes as A
from fusecc.compiler.ir import Block, Operation
from fusecc.compiler.traits import FUSION_CLASSES, ConstantLike, Elementwise, Injective, Terminator
from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.fusion import cost_model as cm
from fusecc.passes.fusion.log import FusionLog, article

# Kinds whose growth by an elementwise op changes only registers and op count.
QUICK_KINDS = ("elementwise", "injective", "matmul")

FORBID = "fusion.forbid"
FORCE = "fusion.force"
PARTS = "fusion.parts"


def flag(op: Operation, name: str) -> bool:
    """A discardable boolean attribute such as `fusion.forbid = true`."""
    value = op.attributes.get(name)
    return isinstance(value, A.UnitAttr) or (isinstance(value, A.BoolAttr) and value.value)


def is_fusable(op: Operation) -> bool:
    """Tensor ops with a fusion class; constants stay outside groups."""
    return not op.has_trait(ConstantLike) and any(op.has_trait(t) for t in FUSION_CLASSES)


def is_elementwise_like(op: Operation) -> bool:
    return op.has_trait(Elementwise) or op.has_trait(Injective)


# --------------------------------------------------------------------------- clusters


class Cluster:
    """Ops that will become one group. `kind` is a `fusion.group` kind."""

    __slots__ = ("ops", "kind", "parts", "last", "fixed", "dead", "space", "bound", "_cost")

    def __init__(self, ops: list[Operation], kind: str, last: float, fixed: bool = False):
        self.ops = ops
        self.kind = kind
        self.parts: list[tuple[str, list[Operation]]] | None = None  # horizontal only
        self.last = last  # position of the last op
        self.fixed = fixed  # came from a group in the input: grows no further
        self.dead = False  # merged into another cluster
        self.space = None  # phase data, e.g. a reduction's row space
        self.bound: int | None = None  # upper bound on registers/thread, kept cheaply while growing
        self._cost: cm.GroupCost | None = None

    def __repr__(self) -> str:
        return f"<cluster {self.kind} {[op.name for op in self.ops]}>"


def natural_kind(op: Operation) -> str:
    return cm.infer_kind([op])


# --------------------------------------------------------------------------- the partition


class Partition:
    """Clusters over the ops of one function block, plus planning helpers."""

    def __init__(self, block: Block, hardware: Hardware, log: FusionLog, existing: Iterable[tuple[str, list[Operation]]] = ()):
        self.block = block
        self.hardware = hardware
        self.log = log
        self.position: dict[Operation, float] = {}
        for index, op in enumerate(block):
            self.position[op] = float(index)
        self.cluster_of: dict[Operation, Cluster] = {}
        self.clusters: list[Cluster] = []
        self._copies: dict[Operation, int] = {}
        for kind, ops in existing:
            ops = [op for op in ops if op in self.position]
            if ops:
                cluster = self.new_cluster(ops, kind)
                cluster.fixed = True

    # --- queries -------------------------------------------------------------
    def ops(self) -> list[Operation]:
        """Fusable ops in program order."""
        return [op for op in self.block if is_fusable(op)]

    def free(self, op: Operation) -> bool:
        """Fusable, not yet in a cluster."""
        return op in self.position and op not in self.cluster_of and is_fusable(op)

    def users_outside(self, ops: Iterable[Operation], members) -> list[Operation]:
        out: dict[Operation, None] = {}
        for op in ops:
            for r in op.results:
                for user in r.users:
                    if user not in members:
                        out[user] = None
        return list(out)

    # --- clusters ------------------------------------------------------------
    def new_cluster(self, ops: list[Operation], kind: str | None = None) -> Cluster:
        kind = kind or cm.infer_kind(ops)
        cluster = Cluster(list(ops), kind, max(self.position[op] for op in ops))
        for op in ops:
            self.cluster_of[op] = cluster
        self.clusters.append(cluster)
        return cluster

    def remove(self, cluster: Cluster) -> None:
        cluster.dead = True
        self.clusters.remove(cluster)

    def add(self, cluster: Cluster, ops: Iterable[Operation]) -> None:
        for op in ops:
            cluster.ops.append(op)
            self.cluster_of[op] = cluster
            cluster.last = max(cluster.last, self.position[op])
        if cluster.kind == "injective":
            cluster.kind = "elementwise"
        cluster._cost = None
        cluster.bound = None

    def sorted_ops(self, cluster: Cluster) -> list[Operation]:
        return sorted(cluster.ops, key=self.position.__getitem__)

    def cost(self, cluster: Cluster) -> cm.GroupCost:
        if cluster._cost is None:
            cluster._cost = cm.estimate_ops(self.sorted_ops(cluster), self.hardware, cluster.kind)
        return cluster._cost

    def duplicate(self, op: Operation) -> Operation:
        """A copy of `op` right after it, for one consumer to own. Its position
        lies between the original's and the next op's."""
        clone = op.clone({})
        self.block.insert_after(clone, op)
        copies = self._copies.get(op, 0) + 1
        self._copies[op] = copies
        self.position[clone] = self.position[op] + 0.5 - 0.5 / (copies + 1)
        self.log.duplicated[clone] = self.log.duplicated.get(op, op)
        return clone

    # --- decisions -------------------------------------------------------------
    def absorb(self, cluster: Cluster, ops: list[Operation], partner: Operation | None, quick: bool = False) -> bool:
        """Add `ops` (all free) to `cluster` if nothing forbids it and the cost
        model agrees. `quick` says the caller knows the addition introduces no
        recomputation, so only the cheap limit checks are needed."""
        for op in ops:
            if flag(op, FORBID):
                self.log.refuse(op, partner, "fusion.forbid is set on it")
                return False
        if any(flag(op, FORBID) for op in cluster.ops):
            blocker = next(op for op in cluster.ops if flag(op, FORBID))
            self.log.refuse(ops[0], partner, f"fusion.forbid is set on {self.log.name(blocker)}")
            return False
        forced = any(flag(op, FORCE) for op in ops) or (partner is not None and flag(partner, FORCE))
        hw = self.hardware
        if quick and cluster.kind in QUICK_KINDS and len(cluster.ops) + len(ops) <= hw.max_ops_per_group:
            bound = self._register_bound(cluster, ops)
            if bound <= hw.registers_per_thread:
                self.add(cluster, ops)
                cluster.bound = bound
                return True
        merged_ops = sorted([*cluster.ops, *ops], key=self.position.__getitem__)
        merged = cm.estimate_ops(merged_ops, self.hardware, cluster.kind)
        parts = [self.cost(cluster)] + [cm.estimate_ops(sorted(ops, key=self.position.__getitem__), self.hardware)]
        decision = cm.decide(parts, merged, self.hardware, forced)
        if not decision.fuse:
            self.log.refuse(ops[0], partner, decision.reason)
            return False
        if forced and decision.reason.startswith("forced"):
            self.log.note(ops[0].location, f"{{group}}: {decision.reason}", ops[0])
        self.add(cluster, ops)
        cluster._cost = merged
        cluster.bound = merged.registers_per_thread
        return True

    def merge(self, cluster: Cluster, other: Cluster, partner: Operation | None) -> bool:
        """Merge the whole of `other` into `cluster` if the cost model agrees
        (the caller has checked that the merge is legal)."""
        ops = self.sorted_ops(other)
        if any(flag(op, FORBID) for op in (*ops, *cluster.ops)):
            blocker = next(op for op in (*ops, *cluster.ops) if flag(op, FORBID))
            self.log.refuse(ops[-1], partner, f"fusion.forbid is set on {self.log.name(blocker)}")
            return False
        forced = any(flag(op, FORCE) for op in ops) or (partner is not None and flag(partner, FORCE))
        merged = cm.estimate_ops(sorted([*cluster.ops, *ops], key=self.position.__getitem__), self.hardware, cluster.kind)
        decision = cm.decide([self.cost(cluster), self.cost(other)], merged, self.hardware, forced)
        if not decision.fuse:
            self.log.refuse(ops[-1], partner, decision.reason)
            return False
        if forced and decision.reason.startswith("forced"):
            self.log.note(ops[-1].location, f"{{group}}: {decision.reason}", ops[-1])
        self.remove(other)
        self.add(cluster, ops)
        cluster._cost = merged
        return True

    def _register_bound(self, cluster: Cluster, ops: list[Operation]) -> int:
        """An upper bound on the registers per thread of `cluster` plus `ops`:
        the last exact estimate, plus for every added op a pointer and live
        values for each operand it reads from outside and each result."""
        if cluster.bound is None:
            cluster.bound = self.cost(cluster).registers_per_thread
        hw = self.hardware
        members = self.cluster_of
        added = 0
        for op in ops:
            outside = sum(1 for v in op.operands if members.get(v.defining_op) is not cluster and not cm.is_free_input(v))
            added += outside + len(op.results)
        per_value = cm.register_growth_per_value(hw)
        return cluster.bound + added * per_value

    # --- growth ----------------------------------------------------------------
    def absorb_producers(self, cluster: Cluster, admit: Callable[[Cluster, Operation], str | None], limit: int = 64) -> None:
        """Pull in free producers whose every user is already in the cluster
        (a prologue), transitively, as far as `admit` and the cost model allow."""
        stack = [v.defining_op for op in cluster.ops for v in op.operands if v.defining_op is not None]
        seen: set[Operation] = set()
        while stack and limit > 0:
            producer = stack.pop()
            if producer in seen or not self.free(producer):
                continue
            seen.add(producer)
            if any(user not in self.cluster_of or self.cluster_of[user] is not cluster for r in producer.results for user in r.users):
                continue
            if admit(cluster, producer) is not None:
                continue
            partner = next(u for r in producer.results for u in r.users)
            if self.absorb(cluster, [producer], partner):
                limit -= 1
                stack.extend(v.defining_op for v in producer.operands if v.defining_op is not None)

    def grow(self, cluster: Cluster, admit: Callable[[Cluster, Operation], str | None], quick: Callable[[Cluster, Operation], bool] = lambda c, o: False) -> None:
        """Absorb the cluster's users one at a time in program order.

        Stops at the first user it cannot take (structurally, or by the cost
        model): every user left outside then comes after the cluster's last
        op, which is what keeps later phases free of cycles."""
        members = self.cluster_of
        pending: list[tuple[float, int, Operation]] = []
        queued: set[Operation] = set()

        def push_users(op: Operation) -> None:
            for r in op.results:
                for user in r.users:
                    if members.get(user) is not cluster and user not in queued:
                        queued.add(user)
                        heapq.heappush(pending, (self.position.get(user, float("inf")), id(user), user))

        for op in list(cluster.ops):
            push_users(op)
        while pending:
            _, _, user = heapq.heappop(pending)
            if user.has_trait(Terminator):
                return
            partner = self._producer_in_cluster(user, cluster)
            if not self.free(user):
                owner = self.cluster_of.get(user)
                if owner is not None and is_fusable(user):
                    self.log.refuse(user, partner, f"it is already in {article(owner.kind)} {owner.kind} group", structural=True)
                return
            reason = admit(cluster, user)
            if reason is not None:
                self.log.refuse(user, partner, reason, structural=True)
                return
            if not self.absorb(cluster, [user], partner, quick=quick(cluster, user)):
                return
            push_users(user)

    def _producer_in_cluster(self, op: Operation, cluster: Cluster) -> Operation | None:
        for v in op.operands:
            d = v.defining_op
            if d is not None and self.cluster_of.get(d) is cluster:
                return d
        return None

    # --- cluster graph ---------------------------------------------------------
    def depths(self) -> dict[object, int]:
        """Longest-path depth of every unit (cluster, or op outside clusters)
        in the graph of units."""
        order, predecessors = unit_graph(self, set(self.clusters))
        depth: dict[object, int] = {}
        for unit in order:
            depth[unit] = max((depth[p] + 1 for p in predecessors[unit]), default=0)
        return depth


# --------------------------------------------------------------------------- the cluster graph


def unit_graph(partition: Partition, chosen: set[Cluster]) -> tuple[list[object], dict[object, set[object]]]:
    """Units (chosen clusters, other ops but constants) in dependence order,
    each as early as its first op allows (Kahn's algorithm keyed by program
    position), and each unit's predecessors."""
    unit_ops: dict[object, list[Operation]] = {}
    first: dict[object, float] = {}
    for op in partition.block:
        if op.has_trait(Terminator) or op.has_trait(ConstantLike):
            continue
        cluster = partition.cluster_of.get(op)
        unit = cluster if cluster in chosen else op
        unit_ops.setdefault(unit, []).append(op)
        first.setdefault(unit, partition.position.get(op, float(len(first))))
    owner: dict[Operation, object] = {op: unit for unit, ops in unit_ops.items() for op in ops}
    predecessors: dict[object, set[object]] = {}
    successors: dict[object, list[object]] = {unit: [] for unit in unit_ops}
    for unit, ops in unit_ops.items():
        preds = {owner[v.defining_op] for op in ops for v in op.operands if v.defining_op in owner} - {unit}
        predecessors[unit] = preds
        for p in preds:
            successors[p].append(unit)
    indegree = {unit: len(preds) for unit, preds in predecessors.items()}
    ready = [(first[u], n, u) for n, u in enumerate(unit_ops) if indegree[u] == 0]
    heapq.heapify(ready)
    order = []
    counter = len(unit_ops)
    while ready:
        _, _, unit = heapq.heappop(ready)
        order.append(unit)
        for s in successors[unit]:
            indegree[s] -= 1
            if indegree[s] == 0:
                counter += 1
                heapq.heappush(ready, (first[s], counter, s))
    if len(order) != len(unit_ops):
        raise RuntimeError("fusion produced a cycle between groups")
    return order, predecessors
