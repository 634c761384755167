"""What a contraction template (matmul, attention) can apply to its result
before the single store: its epilogue abilities, stated once.

A template computes its op's result element by element in registers; an op
of the group that consumes that result is applied to each element on the
way to the store. That works for

  * elementwise ops whose chained operand has the result's shape (a bias, an
    activation, a residual, a cast): the scalar emitter computes them;
  * transposes and reshapes: they only move the element (its index is mapped
    forward), which costs no data movement.

Anything else (a slice, a concat, a broadcast of the result, a reduction)
needs the result at other elements or drops some, so it is no epilogue. The
lowering (`lowering/epilogue.py`) refuses it when it plans an epilogue, and
the fuser admits ops into a contraction's group by the same rule
(`fusion/attention.py`, `fusion/contract.py`), so fusion never forms a group
the lowering cannot lower (issue 16.C).
"""

from __future__ import annotations

from typing import Sequence

from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.traits import Elementwise
from fusecc.dialects import tensor as T

FORWARD_LAYOUT = (T.TransposeOp, T.ReshapeOp)


def epilogue_refusal(op: Operation, chained: Sequence[Value], what: str) -> str | None:
    """Why `op`, which reads the `what` result through `chained` (its operands
    computed from that result), cannot be applied in the template's epilogue;
    None when it can."""
    if isinstance(op, FORWARD_LAYOUT):
        return None
    if not op.has_trait(Elementwise):
        return f"'{op.name}' at {op.location} cannot consume the {what} result in an epilogue: it is neither elementwise nor a transpose or reshape"
    for value in chained:
        if value.type.shape != op.results[0].type.shape:
            return f"'{op.name}' at {op.location} broadcasts the {what} result from {list(value.type.shape)} to {list(op.results[0].type.shape)}; an epilogue maps one element to one element"
    return None


__all__ = ["FORWARD_LAYOUT", "epilogue_refusal"]
