"""A worklist-driven greedy pattern rewriter, as in MLIR and xDSL.

A pattern is `match_and_rewrite(op, rewriter) -> bool`. The driver visits
every op, erases dead pure ops, tries folding and patterns, and requeues
whatever a change touched (new ops, users of replaced values, producers of
erased operands) until nothing changes. Each op is revisited only when
something near it changed, so a run is close to linear in program size.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, ClassVar, Iterable, Sequence

from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.diagnostics import Location
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.traits import Pure, Terminator


class RewritePattern:
    """Override `match_and_rewrite`. `op_names` limits which ops are offered."""

    op_names: ClassVar[tuple[str, ...] | None] = None
    benefit: ClassVar[int] = 1

    def match_and_rewrite(self, op: Operation, rewriter: "PatternRewriter") -> bool:
        raise NotImplementedError


class PatternRewriter(Builder):
    """A builder whose every change is reported to the driver's worklist."""

    def __init__(self, notify: Callable[[Operation], None]):
        super().__init__()
        self._notify = notify
        self.changed = False

    def insert(self, op: Operation) -> Operation:
        super().insert(op)
        self.changed = True
        self._notify(op)
        return op

    def set_insertion_point_before(self, op: Operation) -> None:
        self.set_insertion_point(InsertionPoint.before(op))
        self.location = op.location

    def replace_all_uses_with(self, old: Value, new: Value) -> None:
        for user in old.users:
            self._notify(user)
        old.replace_all_uses_with(new)
        self.changed = True

    def replace_op(self, op: Operation, new: Sequence[Value] | Operation) -> None:
        """Replace `op`'s results with `new` (values, or another op's results) and erase `op`."""
        values = new.results if isinstance(new, Operation) else list(new)
        if len(values) != len(op.results):
            raise ValueError(f"replacing {op.name} needs {len(op.results)} values, got {len(values)}")
        for old, value in zip(op.results, values):
            self.replace_all_uses_with(old, value)
        self.erase_op(op)

    def erase_op(self, op: Operation) -> None:
        for value in op.operands:
            if value.defining_op is not None:
                self._notify(value.defining_op)
        op.erase()
        self.changed = True

    def modify_in_place(self, op: Operation, change: Callable[[], Any]) -> None:
        change()
        self.changed = True
        self._notify(op)
        for result in op.results:
            for user in result.users:
                self._notify(user)


def is_trivially_dead(op: Operation) -> bool:
    return op.has_trait(Pure) and not op.has_trait(Terminator) and not any(r.has_uses() for r in op.results)


Folder = Callable[[Operation, "PatternRewriter"], bool]


def apply_patterns_greedily(
    root: Operation,
    patterns: Iterable[RewritePattern],
    folder: Folder | None = None,
    max_rewrites: int | None = None,
) -> bool:
    """Apply `patterns` (and `folder`, tried first) to everything nested in
    `root` until a fixed point. Returns whether anything changed."""
    by_name: dict[str | None, list[RewritePattern]] = {}
    for pattern in sorted(patterns, key=lambda p: -p.benefit):
        for name in pattern.op_names or (None,):
            by_name.setdefault(name, []).append(pattern)
    generic = by_name.get(None, [])

    worklist: deque[Operation] = deque()
    queued: set[int] = set()

    def push(op: Operation) -> None:
        if id(op) not in queued:
            queued.add(id(op))
            worklist.append(op)

    for op in root.walk(include_self=False):
        push(op)

    rewriter = PatternRewriter(push)
    changed_any = False
    budget = max_rewrites if max_rewrites is not None else 50 * (len(worklist) + 10)
    while worklist:
        op = worklist.popleft()
        queued.discard(id(op))
        if op.parent is None or not root.is_ancestor_of(op):
            continue  # erased or detached since it was queued
        rewriter.changed = False
        if is_trivially_dead(op):
            rewriter.erase_op(op)
            changed_any = True
            continue
        rewriter.set_insertion_point_before(op)
        if folder is not None and folder(op, rewriter):
            changed_any = True
            budget -= 1
            continue
        for pattern in by_name.get(op.name, []) + generic:
            if pattern.match_and_rewrite(op, rewriter):
                changed_any = True
                budget -= 1
                break
        if budget <= 0:
            raise RuntimeError("pattern application did not converge; a pattern probably undoes another")
    return changed_any


def replace_with_new(rewriter: PatternRewriter, op: Operation, op_class, operands, attributes=None, result_types=None, location: Location | None = None) -> Operation:
    """Create `op_class` before `op` and replace `op` with it."""
    new = rewriter.create(op_class, operands, attributes, result_types, location=location or op.location)
    rewriter.replace_op(op, new)
    return new
