"""dce: erase pure ops whose results are unused.

Blocks are swept from the end, so a dead chain goes in one sweep: by the
time an op is reached, its users (later in the block) are already gone.
Regions are swept before the op that holds them is judged, so a dead
`fusion.group` goes whole and a live one loses its dead body ops (those
whose results neither feed the `fusion.yield` nor another live op).

Kept: ops with side effects or without the `Pure` trait (`func.call`),
terminators, and functions. Functions are public (the IR has no private
visibility), so an uncalled function is not dead. A group's unused results
are not removed here; that changes the group's interface, which is the
fusion passes' business.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusecc.compiler.ir import Block, Operation
from fusecc.compiler.pass_manager import Pass, PassContext
from fusecc.compiler.rewriter import is_trivially_dead


def dce_block(block: Block) -> int:
    """Erase dead ops of `block` and of its nested regions; returns how many."""
    removed = 0
    for op in reversed(block):
        if is_trivially_dead(op):
            op.erase()
            removed += 1
            continue
        for region in op.regions:
            for nested in region.blocks:
                removed += dce_block(nested)
    return removed


@dataclass(frozen=True)
class DCE(Pass):
    name = "dce"
    summary = "Erase unused pure ops, in regions too"

    def run(self, op: Operation, context: PassContext) -> None:
        removed = sum(dce_block(block) for region in op.regions for block in region.blocks)
        context.statistics["dce.removed"] = context.statistics.get("dce.removed", 0) + removed
