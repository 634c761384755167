"""inline: replace every `func.call` by a copy of the callee's body.

Callees are inlined bottom-up (a function's own calls are inlined before
it is copied into its callers), so one copy per call site suffices and
nested calls disappear too. A call cycle (recursion, direct or mutual)
cannot be inlined: it is a located error at the call that closes the cycle,
naming the cycle.

Copied ops keep their own locations (those of the callee's source), so a
diagnostic about an inlined op points at the line that wrote it. Functions
are kept, called or not: the IR has no private visibility, so every
function may be an entry point; run `dce`-like cleanup of functions
yourself if you need it.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusecc.compiler.diagnostics import error
from fusecc.compiler.dim_binding import call_dim_mapping, substitute_dims
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.pass_manager import Pass, PassContext
from fusecc.dialects.func import CallOp, FuncOp


def inline_call(call: CallOp, callee: FuncOp) -> None:
    """Copy `callee`'s body before `call` and let the copy's results replace the call's."""
    value_map: dict[Value, Value] = dict(zip(callee.body.args, call.operands))
    block = call.parent
    returned: list[Value] = []
    # The callee's `?` dims are the caller's at this call (s0 -> N).
    dims = call_dim_mapping([a.type for a in callee.body.args], [v.type for v in call.operands])
    for op in callee.body:
        if op is callee.body.last_op:
            returned = [value_map.get(v, v) for v in op.operands]
            break
        copy = op.clone(value_map)
        if dims:
            for inner in copy.walk():
                for value in (*inner.results, *(a for r in inner.regions for b in r.blocks for a in b.args)):
                    value.type = substitute_dims(value.type, dims)
        block.insert_before(copy, call)
    for old, new in zip(call.results, returned):
        old.replace_all_uses_with(new)
    call.erase()


class Inliner:
    """Inlines the calls of each function once, callees first."""

    def __init__(self, module: Operation):
        self.functions = {f.sym_name: f for f in module.walk(include_self=False) if isinstance(f, FuncOp)}
        self.done: set[FuncOp] = set()
        self.path: list[FuncOp] = []  # the chain of functions being inlined into each other

    def calls_in(self, func: FuncOp) -> list[CallOp]:
        return [op for op in func.walk(include_self=False) if isinstance(op, CallOp)]

    def inline_into(self, func: FuncOp) -> int:
        if func in self.done:
            return 0
        inlined = 0
        for call in self.calls_in(func):
            callee = self.functions.get(call.callee)
            if callee is None:
                raise error(call.location, f"cannot inline the call to @{call.callee}: no such function")
            self.enter(callee, call)
            inlined += self.inline_into(callee)
            self.path.pop()
            inline_call(call, callee)
            inlined += 1
        self.done.add(func)
        return inlined

    def enter(self, callee: FuncOp, call: CallOp) -> None:
        if callee in self.path:
            cycle = " -> ".join("@" + f.sym_name for f in self.path[self.path.index(callee) :] + [callee])
            raise error(call.location, f"cannot inline the recursive call to @{callee.sym_name} (call cycle {cycle})")
        self.path.append(callee)


@dataclass(frozen=True)
class Inline(Pass):
    name = "inline"
    summary = "Inline every func.call (callees first); recursion is an error"

    def run(self, op: Operation, context: PassContext) -> None:
        inliner = Inliner(op)
        total = 0
        for func in list(inliner.functions.values()):
            inliner.path = [func]
            total += inliner.inline_into(func)
        context.statistics["inline.calls"] = context.statistics.get("inline.calls", 0) + total
