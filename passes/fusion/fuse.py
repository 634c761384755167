"""`fuse`: partition every function into fusion groups, one kernel each.

    fusecc-opt model.ir -p 'fuse{target=h200}' [--explain-fusion]

runs the fusion phases below on one plan per function and materialises
the plan as `fusion.group` ops. `fuse{only=elementwise}` (or
`only=matmul,elementwise`) runs the listed phases alone and groups only what
they fuse; `fuse{horizontal=false}` switches one phase off. The target is
the `target` option, else the pass context's (`--target`). Existing groups
in the input are kept as they are and renumbered, so golden tests can start
from fused IR.

Phases, in order of precedence (an earlier phase claims ops first because
its pattern saves more per op):

1. attention (`attention.py`): raise op-by-op attention to
   `tensor.attention`; group it with its head split and merge;
2. sibling matmuls (`siblings.py`, part of horizontal fusion): matmuls
   sharing an input become one matmul on concatenated weights;
3. matmul (`matmul.py`): epilogues (bias, scale, activation, residual,
   cast) and cheap prologues join their matmul;
4. reduction (`reduction.py`): row-wise reductions with their elementwise
   prologue and epilogue, so softmax/layernorm/rmsnorm become one group;
5. elementwise (`elementwise.py`): producer→consumer chains, broadcasts,
   multi-use producers (duplicated when cheap, else multi-output);
6. horizontal (`horizontal.py`): independent same-kind, same-shape groups
   share one launch.

Every decision goes through the cost model (`cost_model.py`), which refuses
fusions that break a hardware limit and fusions that do not pay; with
`--explain-fusion` each op gets a remark saying which group it joined and
what that saves, or what it was not fused with and why.

Contract with the lowerings (loops, CPU, CUDA)
----------------------------------------------
After `fuse`:

* Every tensor op except `tensor.constant` is inside exactly one
  `fusion.group`; ops left alone get a singleton group of their natural
  kind. The number of groups is the kernel count. Constants stay at
  function level; splat constants are also cloned into the groups that
  read them, so they are never group inputs.
* Group `id`s are dense, in program order, from 0 across the module; remarks
  say `group N`. Groups are placed in dependence order.
* A group's operands are its inputs (read from memory), its results its
  outputs (written once); every other value in its body is an intermediate
  that the lowering keeps in registers or shared memory.
* Bodies, by kind:
  - `elementwise`: only Elementwise/Broadcasting/Injective ops (and splat
    constants). The lowering evaluates each output over its own shape as an
    index expression: broadcasts and layout ops remap indices, values read
    at more points than they have are recomputed (the cost model charged
    that). Outputs usually share one iteration shape.
  - `injective`: a single layout op.
  - `reduction`: a row-wise computation over a row space `R + I` (I: the
    reduced trailing axes of the first reduction or normalising composite).
    Prologue: Elementwise/Injective ops computing reduction inputs from
    group inputs. One or more reductions over the trailing axes of
    full-row values (`reduce_*`, and composite softmax (last axis),
    layernorm, rmsnorm as they are). Epilogue: Elementwise ops whose results
    are full rows (`R + I`) or reduced rows (`R + 1…1` or `R`), reshapes
    between reduced forms, and `broadcast_to` of reduced rows to full rows.
    A thread block owns whole rows.
  - `matmul`: exactly one `tensor.matmul` (batched allowed). Prologue: ops
    that compute the matmul's operands or the epilogue's side inputs from
    group inputs only — layout ops (transpose, the concatenation of sibling
    weights or biases) and elementwise ops of at most one flop per element
    that do not enlarge their input. Epilogue: Elementwise ops on the
    matmul result shape, each reading the running result and side inputs
    (bias, residual, scales) broadcast to that shape. The tiled kernel
    applies the epilogue to its accumulator tile and stores once.
  - `attention`: exactly one `tensor.attention` (op-by-op chains are raised
    into it, scale and mask included), plus layout ops (slice, reshape,
    transpose) computing its operands from group inputs (head split) and a
    chain of layout ops on its result (head merge), nothing else. The
    lowering never materialises the S×T scores.
  - `horizontal`: independent parts with no dataflow between them, each a
    valid group of another kind. Parts are the connected components of the
    body's op-to-op dataflow, in body order; the `fusion.parts` attribute
    lists their kinds (`parts.horizontal_parts(group)` returns
    (kind, ops) pairs).
  - `opaque`: a single op that no rule fuses.
* `cost_model.estimate_group(group, hardware)` gives the model's bytes,
  flops, registers per thread, shared memory and time for any group; its
  registers and shared memory are `kernel_resources` for the tiles the tiler
  chooses (`tiling.choose_tiles` writes the same figures on the group).

Users steer fusion with discardable attributes on ops: `fusion.forbid =
true` keeps an op out of every multi-op group; `fusion.force = true` fuses
it even where the cost model would refuse (never where fusion is illegal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusecc.compiler.ir import Operation
from fusecc.compiler.pass_manager import Pass, PassContext, PipelineError
from fusecc.passes.backends.hardware import Hardware, pass_hardware
from fusecc.dialects.fusion import GroupOp

from fusecc.passes.fusion.attention import decompose_unfit_attention, plan_attention, raise_attention
from fusecc.passes.fusion.elementwise import plan_elementwise
from fusecc.passes.fusion.horizontal import plan_horizontal
from fusecc.passes.fusion.matmul import merge_prologues, plan_matmul
from fusecc.passes.fusion.log import FusionLog, value_names
from fusecc.passes.fusion.materialize import flatten_groups, materialize
from fusecc.passes.fusion.partition import Partition
from fusecc.passes.fusion.reduction import plan_reductions
from fusecc.passes.fusion.siblings import merge_sibling_matmuls

PHASES = ("attention", "matmul", "reduction", "elementwise", "horizontal")


@dataclass
class FusionResult:
    groups: list[GroupOp]
    logs: list[tuple[FusionLog, list[GroupOp]]]  # per function

    def emit_remarks(self, diagnostics) -> None:
        for log, groups in self.logs:
            log.emit(diagnostics, groups)


def fuse_function(func: Operation, hw: Hardware, enabled: set[str], group_everything: bool, first_id: int, names: bool = True) -> tuple[list[GroupOp], FusionLog]:
    log = FusionLog(hw)
    if names:  # the remarks' `%7`, as the user sees the input; costs a print
        log.names = value_names(func)
    block = func.body
    existing = flatten_groups(block)
    protected = {op for _, ops in existing for op in ops}
    if "attention" in enabled:
        raise_attention(block, log, protected)
    decompose_unfit_attention(block, log, protected)
    if "horizontal" in enabled:
        merge_sibling_matmuls(block, log, protected)
    partition = Partition(block, hw, log, existing)
    if "attention" in enabled:
        plan_attention(partition)
    if "matmul" in enabled:
        plan_matmul(partition)
    if "reduction" in enabled:
        plan_reductions(partition)
    if "elementwise" in enabled:
        plan_elementwise(partition)
    if "matmul" in enabled:
        merge_prologues(partition)
    if "horizontal" in enabled:
        plan_horizontal(partition)
    return materialize(partition, group_everything, first_id), log


def fuse_module(module: Operation, hw: Hardware, enabled=PHASES, group_everything: bool = True, explain: bool = True) -> FusionResult:
    """Fuse every function of `module` in place. With `explain`, the log
    names values as the printer would (for remarks and reports)."""
    result = FusionResult([], [])
    for func in [op for op in module.body if op.name == "func.func"]:
        groups, log = fuse_function(func, hw, set(enabled), group_everything, len(result.groups), explain)
        result.groups.extend(groups)
        result.logs.append((log, groups))
    return result


@dataclass(frozen=True)
class Fuse(Pass):
    """`fuse`: every phase, or with `only=` the listed phases alone."""

    name: ClassVar[str] = "fuse"
    summary: ClassVar[str] = "partition every function into fusion groups (one kernel each), driven by the cost model"
    anchor: ClassVar[str] = "builtin.module"
    target: str = ""  # the hardware whose cost model decides; "" takes the context's
    # Run only these phases (`only=matmul,elementwise`), in the fixed order of
    # PHASES, and group only what they fuse: ops they leave alone stay bare,
    # so a golden test of one phase sees that phase's groups only.
    only: tuple[str, ...] = ()
    attention: bool = True
    matmul: bool = True
    reduction: bool = True
    elementwise: bool = True
    horizontal: bool = True

    def __post_init__(self):
        unknown = [phase for phase in self.only if phase not in PHASES]
        if unknown:
            raise PipelineError(f"pass 'fuse': unknown phase '{unknown[0]}' in only= (phases: {', '.join(PHASES)})")

    def enabled(self) -> tuple[str, ...]:
        return tuple(phase for phase in PHASES if (phase in self.only if self.only else getattr(self, phase)))

    def run(self, op: Operation, context: PassContext) -> None:
        hw = pass_hardware(self, op, context)
        result = fuse_module(op, hw, self.enabled(), group_everything=not self.only, explain=context.explain)
        context.statistics[f"{self.name}.groups"] = len(result.groups)
        if context.explain:
            result.emit_remarks(context.diagnostics)
