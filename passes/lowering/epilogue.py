"""Epilogues: from one element a template computed to the group's outputs.

A contraction template (matmul, attention) computes its op's result itself,
element by element, in registers. What the group does with that result —
bias, activation, residual, cast (elementwise ops) and head merges
(transpose, reshape) — is its epilogue, applied to each element before the
single store:

  * elementwise ops are emitted by the scalar emitter, with the result
    bound to the template's scalar, so their other operands (a bias, a
    residual) are loaded and computed as anywhere else;
  * layout ops move the element: their index is mapped forward (transpose
    permutes it, reshape re-linearises it), which costs no data movement.

Every yielded value must be reached from the result this way, one element
to one element; an op that needs the result at another element (a
reduction, a broadcast of the result) is refused when the epilogue is
planned, before any code is written. That rule is `tiling.epilogues`,
which the fuser obeys too.
"""

from __future__ import annotations

from fusecc.compiler.ir import Operation, Value
from fusecc.dialects import tensor as T
from fusecc.dialects.fusion import GroupOp

from fusecc.passes.lowering.kernel_writer import GuardedEmitter
from fusecc.passes.lowering.scalar_emitter import Index, IndexMath, LoweringError, reshape_index
from fusecc.passes.tiling.epilogues import FORWARD_LAYOUT, epilogue_refusal


def forward_index(op: Operation, idx: list[Value], im: IndexMath) -> list[Value]:
    """Where the input element at `idx` lands in a layout op's result."""
    if isinstance(op, T.TransposeOp):
        return [idx[axis] for axis in op.attr("perm")]
    return reshape_index(idx, op.input.type.shape, op.result.type.shape, im)


class Epilogue:
    """The ops of `group` that consume `root`, planned once, emitted per element."""

    def __init__(self, group: GroupOp, root: Value, outputs: list[Value], what: str):
        self.root = root
        self.what = what
        reached = {root}
        self.steps: list[Operation] = []
        for op in group.body_ops():
            chain = [v for v in op.operands if v in reached]
            if not chain:
                continue
            self._check_step(op, chain)
            self.steps.append(op)
            reached.add(op.result)
        self.stores: list[tuple[Value, Value]] = []
        for value, buffer in zip(group.yield_op.operands, outputs):
            if value not in reached:
                where = value.defining_op.name if value.defining_op is not None else "a group input"
                raise LoweringError(f"the {what} group yields a value ({where}) that is not computed from the {what} result")
            self.stores.append((value, buffer))

    def _check_step(self, op: Operation, chain: list[Value]) -> None:
        refusal = epilogue_refusal(op, chain, self.what)
        if refusal is not None:
            raise LoweringError(refusal)

    def emit(self, emitter: GuardedEmitter, idx: Index, scalar: Value, guard: Value | None = None) -> None:
        """Apply the epilogue to the root's element `idx` (value `scalar`) and
        store every yielded value it reaches; `guard` guards the loads of
        other operands and the stores."""
        with emitter.guarded(guard):
            self._emit(emitter, idx, scalar, guard)

    def _emit(self, emitter: GuardedEmitter, idx: Index, scalar: Value, guard: Value | None) -> None:
        known: dict[Value, tuple[tuple[Value, ...], Value]] = {}

        def learn(value: Value, at: Index, s: Value) -> None:
            key = tuple(at)
            known[value] = (key, s)
            emitter.bind(value, lambda i, value=value, key=key: self._lookup(known, value, key, i))

        for op in self.steps:  # bound for the previous element; computed afresh below
            emitter.bound.pop(op.result, None)
        learn(self.root, idx, scalar)
        for op in self.steps:
            source = next(v for v in op.operands if v in known)
            at = list(known[source][0])
            if isinstance(op, FORWARD_LAYOUT):
                learn(op.result, forward_index(op, at, emitter.im), known[source][1])
            else:
                learn(op.result, at, emitter.at(op.result, at))
        for value, buffer in self.stores:
            at, s = known[value]
            emitter.store(s, buffer, list(at), guard)

    def _lookup(self, known, value: Value, key: tuple, idx: Index) -> Value:
        if len(idx) == len(key) and all(a is b for a, b in zip(idx, key)):
            return known[value][1]
        raise LoweringError(f"the {self.what} epilogue reads the {self.what} result at another element than the one it writes (for example a transpose of a square result); that is not an elementwise epilogue")
