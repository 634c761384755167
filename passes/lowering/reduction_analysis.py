"""What a group reduces: every non-elementwise op as statistics plus a formula.

Each reduction-like op of a group body (`reduce_*`, `softmax`, `layernorm`,
`rmsnorm`, and, for the generic template, `matmul` and `attention`) is a
`Node`: a few `Stat`s — one combine (sum, max, min) of an element
expression over a `reduced_shape`, for every index of a `kept_shape` — and
a formula for the op's result from its stats:

    softmax(x, axis)   max  = max_j x[k, j]
                       sum  = sum_j exp(x[k, j] - max[k])
                       y[k, j] = exp(x[k, j] - max[k]) / sum[k]
    layernorm(x, g, b) s1 = sum_j x;  mean = s1 / N
                       s2 = sum_j (x - mean)^2;  y = (x - mean) / sqrt(s2 / N + eps) * g + b
    rmsnorm(x, g)      s  = sum_j x^2;  y = x / sqrt(s / N + eps) * g
    reduce_*(x, axes)  one stat over `axes`; mean divides by their size
    matmul(a, b)       out[..., i, j] = sum_k a[..., i, k] * b[..., k, j]
    attention(q,k,v)   max and sum of the scores per query row, then
                       out[..., s, d] = sum_t exp(score - max) / sum * v[..., t, d]

The formulas follow `runtime.reference` operation by operation, so results
differ from it only by the order of summation, and where a template
divides by a row's statistic through `Context.divide` (softmax's sum,
the norms' root) by multiplying with its reciprocal instead (the CPU row
kernel: a division costs six multiplications there; one more rounding,
within 1.5 ulp of the quotient). A stat marked `reused`
(softmax's sum) has its elements read again by the formula, through
`Context.element`: a template may keep them while it reduces (the CPU row
kernel does) instead of computing them twice.

Stats are computed in `level`s: a stat can use the stats of earlier levels
(softmax's sum uses its max; a reduction of a softmax uses both). Templates
supply `lookup(stat, kept_index) -> scalar`, which is a register in a fused
row kernel and a load from a scratch buffer in a staged one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.types import ScalarType, f32
from fusecc.dialects import arith
from fusecc.dialects import math as m
from fusecc.dialects import tensor as T
from fusecc.dialects.fusion import GroupOp

from fusecc.passes.lowering.kernel_builder import KernelBuilder, compute_type
from fusecc.passes.lowering.scalar_emitter import LoweringError, ScalarEmitter, broadcast_index, is_elementwise_computable

Index = list[Value]


class Context(Protocol):
    """What stat elements and node formulas may use."""

    em: ScalarEmitter
    kb: KernelBuilder

    def lookup(self, stat: "Stat", kept: Index) -> Value: ...

    def element(self, stat: "Stat", kept: Index, reduced: Index) -> Value:
        """`stat`'s element at (kept, reduced): recomputed, or read back
        where the template kept it (a `reused` stat's elements)."""
        ...

    def divide(self, numerator: Value, denominator: Value) -> Value:
        """numerator / denominator, the denominator the same for the whole
        row (made of stats): a division, or a multiplication by its
        reciprocal where the template's tolerance allows (the CPU row kernel)."""
        ...


@dataclass(eq=False)
class Stat:
    node: "Node"
    name: str
    combine: str  # "sum" | "max" | "min" (numpy's: NaN wins) | "maxnum" (fmaxf: NaN ignored)
    kept_shape: tuple[int, ...]
    reduced_shape: tuple[int, ...]
    type: ScalarType
    element: Callable[[Context, Index, Index], Value]
    level: int = 0
    # The node's formula reads this stat's elements again (softmax's exp(x -
    # max)): a template that can keep them while reducing saves recomputing.
    reused: bool = False

    def __repr__(self) -> str:
        return f"<stat {self.name} of {self.node.op.name} level {self.level}>"


@dataclass(eq=False)
class Node:
    op: Operation
    stats: list[Stat] = field(default_factory=list)
    value: Callable[[Context, Index], Value] | None = None  # the op's result at an index

    def stat(self, name: str, combine: str, kept, reduced, t, element, reused: bool = False) -> Stat:
        s = Stat(self, name, combine, tuple(kept), tuple(reduced), t, element, reused=reused)
        self.stats.append(s)
        return s


def without(idx: Sequence, axes: Sequence[int]) -> list:
    drop = set(axes)
    return [v for pos, v in enumerate(idx) if pos not in drop]


def interleave(kept: Sequence, reduced: Sequence, axes: Sequence[int], rank: int) -> list:
    """The full index from the kept and the reduced parts (axes sorted)."""
    out, k, r = [], iter(kept), iter(reduced)
    axis_set = set(axes)
    for pos in range(rank):
        out.append(next(r) if pos in axis_set else next(k))
    return out


# --------------------------------------------------------------------------- per-op rules

COMBINE_OF = {"tensor.reduce_sum": "sum", "tensor.reduce_mean": "sum", "tensor.reduce_max": "max", "tensor.reduce_min": "min"}


def element_count(cx, count, t=f32):
    """A mean's divisor as a float: a constant, or (a `?` axis,
    docs/dynamic-shapes.md) the runtime size converted once where it is used."""
    if type(count) is int:
        return cx.em.s.const(float(count), t)
    return cx.em.s.cast(cx.kb.index(count), t)


def _reduce(op: T.ReduceOp) -> Node:
    x = op.input
    shape, axes, rank = x.type.shape, op.normalized_axes, x.type.rank
    node = Node(op)
    kind = op.name.split("_")[1]
    stat = node.stat(kind, COMBINE_OF[op.name], without(shape, axes), [shape[a] for a in axes], compute_type(x.type.element_type), lambda cx, k, r: cx.em.at(x, interleave(k, r, axes, rank)))
    count = 1
    for a in axes:
        count *= shape[a]
    keepdims = op.attr("keepdims")

    def value(cx: Context, idx: Index) -> Value:
        v = cx.lookup(stat, without(idx, axes) if keepdims else list(idx))
        if op.name == "tensor.reduce_mean":
            v = cx.em.s.div(v, element_count(cx, count, v.type))
        return v

    node.value = value
    return node


def _softmax(op: T.SoftmaxOp) -> Node:
    x = op.input
    shape, rank = x.type.shape, x.type.rank
    axis = op.attr("axis") % rank
    node = Node(op)
    kept, reduced = without(shape, [axis]), [shape[axis]]

    def at(cx, k, r):
        return cx.em.at(x, interleave(k, r, [axis], rank))

    def exp_shifted(cx, k, xv):
        return cx.em.s.exp(cx.em.s.sub(xv, cx.lookup(top, k)))

    # fmaxf is enough for the max: a NaN in the row makes the sum NaN anyway
    top = node.stat("max", "maxnum", kept, reduced, f32, at)
    total = node.stat("sum", "sum", kept, reduced, f32, lambda cx, k, r: exp_shifted(cx, k, at(cx, k, r)), reused=True)

    def value(cx, idx):
        k = without(idx, [axis])
        return cx.divide(cx.element(total, k, [idx[axis]]), cx.lookup(total, k))

    node.value = value
    return node


def _norm(op: Operation) -> Node:
    x = op.input
    shape = x.type.shape
    count = shape[-1]
    node = Node(op)
    kept, reduced = shape[:-1], shape[-1:]
    s = lambda cx: cx.em.s  # noqa: E731

    def at(cx, k, r):
        return cx.em.at(x, list(k) + list(r))

    def param(cx, value: Value, idx):
        return cx.em.at(value, broadcast_index(idx, shape, value.type.shape, cx.em.im))

    def rsqrt_term(cx, stat, k):
        # sqrt(sum / N + eps), in the reference's order
        mean = s(cx).div(cx.lookup(stat, k), element_count(cx, count))
        return s(cx).op(m.SqrtOp, s(cx).add(mean, s(cx).const(op.attr("epsilon"))))

    if op.name == "tensor.layernorm":
        first = node.stat("sum", "sum", kept, reduced, f32, at)

        def centered(cx, k, xv):
            return s(cx).sub(xv, s(cx).div(cx.lookup(first, k), element_count(cx, count)))

        def square(cx, k, r):
            d = centered(cx, k, at(cx, k, r))
            return s(cx).mul(d, d)

        second = node.stat("var", "sum", kept, reduced, f32, square)

        def value(cx, idx):
            k = idx[:-1]
            normed = cx.divide(centered(cx, k, cx.em.at(x, idx)), rsqrt_term(cx, second, k))
            return s(cx).add(s(cx).mul(normed, param(cx, op.gamma, idx)), param(cx, op.beta, idx))

    else:

        def square(cx, k, r):
            v = at(cx, k, r)
            return s(cx).mul(v, v)

        sumsq = node.stat("sumsq", "sum", kept, reduced, f32, square)

        def value(cx, idx):
            normed = cx.divide(cx.em.at(x, idx), rsqrt_term(cx, sumsq, idx[:-1]))
            return s(cx).mul(normed, param(cx, op.gamma, idx))

    node.value = value
    return node


def _matmul_operands(op: T.MatmulOp):
    """Per operand: (value, logical shape, transposed) and the output layout."""
    out = op.result.type.shape
    a, b = op.lhs, op.rhs
    a_log = _swap(a.type.shape) if op.attr("transpose_a") else a.type.shape
    b_log = _swap(b.type.shape) if op.attr("transpose_b") else b.type.shape
    rows = len(a_log) >= 2
    cols = len(b_log) >= 2
    batch_rank = len(out) - rows - cols
    return a_log, b_log, rows, cols, batch_rank


def _swap(shape):
    return (*shape[:-2], shape[-1], shape[-2])


def _physical(idx, transposed: bool):
    return [*idx[:-2], idx[-1], idx[-2]] if transposed else list(idx)


def _matmul(op: T.MatmulOp) -> Node:
    a_log, b_log, rows, cols, batch_rank = _matmul_operands(op)
    out = op.result.type.shape
    batch_shape = out[:batch_rank]
    node = Node(op)

    def element(cx, k, r):
        im = cx.em.im
        batch = k[:batch_rank]
        kk = r[0]
        if len(a_log) == 1:
            a_idx = [kk]
        else:
            a_idx = _physical(broadcast_index(batch, batch_shape, a_log[:-2], im) + [k[batch_rank], kk], op.attr("transpose_a"))
        if len(b_log) == 1:
            b_idx = [kk]
        else:
            b_idx = _physical(broadcast_index(batch, batch_shape, b_log[:-2], im) + [kk, k[-1]], op.attr("transpose_b"))
        return cx.em.s.mul(cx.em.at(op.lhs, a_idx), cx.em.at(op.rhs, b_idx))

    stat = node.stat("dot", "sum", out, [a_log[-1]], compute_type(op.result.type.element_type), element)
    node.value = lambda cx, idx: cx.lookup(stat, list(idx))
    return node


def _attention(op: T.AttentionOp) -> Node:
    q, k, v = op.query, op.key, op.value
    mask = op.mask
    out = op.result.type.shape
    batch_shape = out[:-2]
    nb = len(batch_shape)
    depth, length = q.type.shape[-1], k.type.shape[-2]
    scale = op.effective_scale()
    node = Node(op)

    def score(cx, kept, t):
        """q[s] . k[t] * scale (+ mask) (causal: -inf above the diagonal)."""
        em, kb = cx.em, cx.kb
        batch, s_ = kept[:nb], kept[nb]
        qb = broadcast_index(batch, batch_shape, q.type.shape[:-2], em.im)
        kbi = broadcast_index(batch, batch_shape, k.type.shape[:-2], em.im)

        def step(d, acc):
            return [em.s.add(acc, em.s.mul(em.at(q, qb + [s_, d]), em.at(k, kbi + [t, d])))]

        (dot,) = kb.for_(0, depth, 1, step, [em.s.const(0.0)], name="d")
        value = em.s.mul(dot, em.s.const(scale))
        if mask is not None:
            scores_shape = (*batch_shape, out[-2], length)
            value = em.s.add(value, em.at(mask, broadcast_index(list(batch) + [s_, t], scores_shape, mask.type.shape, em.im)))
        if op.attr("causal"):
            above = kb.cmp("gt", t, s_)
            value = em.s.op(arith.SelectOp, above, em.s.const(float("-inf")), value)
        return value

    row = tuple(out[:-1])
    top = node.stat("max", "maxnum", row, [length], f32, lambda cx, kept, r: score(cx, kept, r[0]))

    def exp_score(cx, kept, t):
        return cx.em.s.exp(cx.em.s.sub(score(cx, kept, t), cx.lookup(top, kept)))

    total = node.stat("sum", "sum", row, [length], f32, lambda cx, kept, r: exp_score(cx, kept, r[0]))

    def weighted(cx, kept, r):
        t = r[0]
        row_idx = kept[:-1]
        p = cx.em.s.div(exp_score(cx, row_idx, t), cx.lookup(total, row_idx))
        vb = broadcast_index(kept[:nb], batch_shape, v.type.shape[:-2], cx.em.im)
        return cx.em.s.mul(p, cx.em.at(v, vb + [t, kept[-1]]))

    result = node.stat("out", "sum", out, [length], f32, weighted)
    node.value = lambda cx, idx: cx.lookup(result, list(idx))
    return node


RULES: dict[str, Callable[[Operation], Node]] = {
    "tensor.reduce_sum": _reduce,
    "tensor.reduce_mean": _reduce,
    "tensor.reduce_max": _reduce,
    "tensor.reduce_min": _reduce,
    "tensor.softmax": _softmax,
    "tensor.layernorm": _norm,
    "tensor.rmsnorm": _norm,
    "tensor.matmul": _matmul,
    "tensor.attention": _attention,
}


# --------------------------------------------------------------------------- the group


@dataclass
class Analysis:
    nodes: list[Node]
    levels: list[list[Stat]]  # levels[0] holds the stats that use no other stat

    @property
    def stats(self) -> list[Stat]:
        return [s for level in self.levels for s in level]

    def row_shape(self) -> tuple[int, ...] | None:
        """The kept shape every stat shares (the rows of a fused row kernel), or None."""
        shapes = {s.kept_shape for s in self.stats}
        return shapes.pop() if len(shapes) == 1 else None


def analyse(group: GroupOp) -> Analysis:
    """Nodes and stat levels of a group body; ops that are neither
    elementwise-computable nor reductions raise LoweringError."""
    return analyse_ops(group.body_ops())


def analyse_ops(ops: Sequence[Operation]) -> Analysis:
    depth: dict[Value, int] = {}  # value -> number of stat levels it waits for
    nodes: list[Node] = []
    stats: list[Stat] = []
    for op in ops:
        base = max((depth.get(v, 0) for v in op.operands), default=0)
        rule = RULES.get(op.name)
        if rule is None:
            if not is_elementwise_computable(op):
                raise LoweringError(f"'{op.name}' at {op.location} has no loop lowering")
            for r in op.results:
                depth[r] = base
            continue
        node = rule(op)
        for i, stat in enumerate(node.stats):
            stat.level = base + i
            stats.append(stat)
        nodes.append(node)
        for r in op.results:
            depth[r] = base + len(node.stats)
    levels: list[list[Stat]] = [[] for _ in range(max((s.level for s in stats), default=-1) + 1)]
    for s in stats:
        levels[s.level].append(s)
    return Analysis(nodes, levels)


def bind_nodes(em: ScalarEmitter, analysis: Analysis, cx: Context) -> None:
    """Make the emitter compute every node's result through its formula."""
    for node in analysis.nodes:
        em.bind(node.op.result, lambda idx, node=node: node.value(cx, list(idx)))


__all__ = ["Analysis", "Context", "Node", "RULES", "Stat", "analyse", "analyse_ops", "bind_nodes", "interleave", "without"]
