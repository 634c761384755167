"""`lower-to-loops`: from functions of fusion groups to kernels and schedules.

Each `func.func` becomes one `loop.schedule` of the same name (inputs: the
function's arguments by name; outputs: `result0`, `result1`, ...) plus the
`loop.kernel`s its groups lower to; every other op of the module stays.

At function level (ops whose results nobody reads are dropped first):
  * `fusion.group`      -> the launches its kind's template returns (`TEMPLATES`);
  * `tensor.constant`   -> `loop.constant` (a read-only global buffer);
  * `tensor.reshape`    -> `loop.view` of its operand's buffer (no kernel);
  * any other tensor op -> a one-op group of its fusion class first, so the
                           pass also lowers unfused programs;
  * `func.return`       -> a returned group result is written straight into
                           its `result<i>` buffer (through a `loop.view`
                           when it is returned reshaped); a returned input,
                           constant, or a value returned twice is copied
                           with `loop.copy`.

Every intermediate (group outputs that are not returned, templates'
scratch buffers) is a `loop.arena_view` at a naive offset: each its own
bytes, aligned for the target (`Hardware.buffer_alignment`). The
`plan-memory` pass then shares the arena between buffers that are not live
at the same time.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.diagnostics import error, located_bug
from fusecc.passes.backends.hardware import Hardware, pass_hardware
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.pass_manager import Pass, PassContext
from fusecc.compiler.traits import Composite, Contraction, Elementwise, Injective, Reduction
from fusecc.compiler.types import MemRefType
from fusecc.dialects import func as F
from fusecc.dialects import loop
from fusecc.dialects import tensor as T
from fusecc.dialects.fusion import GroupOp, YieldOp

from fusecc.compiler import shape_expr
from fusecc.passes.lowering import dynamic_loops
from fusecc.passes.lowering.interface import TEMPLATES, ArgRef, LoweredGroup, memref_for
from fusecc.passes.lowering.matmul_mma import ALLOW_TF32
from fusecc.passes.lowering.scalar_emitter import LoweringError
from fusecc.passes.lowering.share_kernels import structural_key
from fusecc.passes.tiling.geometry import REGISTERS, SHARED_MEMORY

# The tiler's estimates, kept on every kernel of the group (benchmarks/register_estimates.py
# and `fusecc --resource-usage` set them beside ptxas's figures).
ESTIMATES = (REGISTERS, SHARED_MEMORY)

# Modules that register templates; those of other authors load when present.
TEMPLATE_MODULES = ("reduction", "horizontal", "matmul", "attention")


def load_templates() -> None:
    for name in TEMPLATE_MODULES:
        module = f"{__package__}.{name}"
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module)


def fusion_kind(op: Operation) -> str:
    """The kind of a one-op group, from the op's fusion class."""
    if op.name == "tensor.attention":
        return "attention"
    if op.has_trait(Contraction):
        return "matmul"
    if op.has_trait(Reduction) or op.has_trait(Composite):
        return "reduction"
    if op.has_trait(Elementwise):
        return "elementwise"
    if op.has_trait(Injective):
        return "injective"
    return "opaque"


def wrap_in_group(op: Operation, group_id: int) -> GroupOp:
    """Replace `op` by a one-op `fusion.group` around a clone of it."""
    inputs = list(dict.fromkeys(op.operands))
    group = GroupOp.build(inputs, op.result_types, fusion_kind(op), op.location, group_id)
    mapping = dict(zip(inputs, group.body.args))
    inner = group.body.append(op.clone(mapping))
    group.body.append(YieldOp.create(list(inner.results), location=op.location))
    op.parent.insert_before(group, op)
    for old, new in zip(op.results, group.results):
        old.replace_all_uses_with(new)
    op.erase()
    return group


class Names:
    """Symbol names of one module, kept unique."""

    def __init__(self, taken):
        self.taken = set(taken)

    def claim(self, name: str) -> str:
        unique, n = name, 1
        while unique in self.taken:
            unique = f"{name}_{n}"
            n += 1
        self.taken.add(unique)
        return unique


class FunctionLowering:
    def __init__(self, func: F.FuncOp, hw: Hardware, names: Names, allow_tf32: bool = False):
        self.func = func
        self.hw = hw
        self.allow_tf32 = allow_tf32
        self.names = names
        inputs = [memref_for(t) for t in func.function_type.inputs]
        outputs = [memref_for(t) for t in func.function_type.results]
        input_names = [a.name_hint or f"arg{i}" for i, a in enumerate(func.arguments)]
        self.schedule = loop.ScheduleOp.build(func.sym_name, inputs, outputs, input_names, [f"result{i}" for i in range(len(outputs))], func.location)
        self.b = Builder(InsertionPoint.at_end(self.schedule.body), func.location)
        self.buffers: dict[Value, Value] = dict(zip(func.arguments, self.schedule.input_args))
        self.reshapes: dict[Value, Value] = {}
        self.kernels: list[loop.KernelOp] = []
        self.lowered: dict[tuple, LoweredGroup] = {}  # by the group's structure
        self.arena = 0
        self.dynamic_arena: list[str] = []  # the naive plan's `?`-sized buffers, aligned byte sizes

    # --- buffers ---------------------------------------------------------------
    def arena_buffer(self, t: MemRefType, hint: str | None = None) -> Value:
        """A fresh intermediate at the naive plan's next offset."""
        offset = self.arena
        if self.dynamic_arena:
            offset = shape_expr.total([offset, *self.dynamic_arena])
        if t.has_dynamic_shape:
            self.dynamic_arena.append(shape_expr.align_up(shape_expr.from_sympy(t.byte_size), self.hw.buffer_alignment))
        else:
            self.arena += align(t.byte_size, self.hw.buffer_alignment)
        view = self.b.create(loop.ArenaViewOp, [], {"offset": offset}, [t])
        view.result.name_hint = hint
        return view.result

    def buffer(self, value: Value) -> Value:
        found = self.buffers.get(value)
        if found is None:
            found = self.view(self.buffer(self.reshapes[value]), memref_for(value.type))
            self.buffers[value] = found
        return found

    def view(self, source: Value, t: MemRefType) -> Value:
        if source.type is t:
            return source
        return self.b.create(loop.ViewOp, [source], {}, [t]).result

    # --- the function ------------------------------------------------------------
    @property
    def dynamic(self) -> bool:
        return any(isinstance(a.type, MemRefType) and a.type.has_dynamic_shape for a in self.schedule.body.args) or bool(self.dynamic_arena)

    def run(self, next_id) -> None:
        body = self.func.body
        if self.dynamic:
            dynamic_loops.check_supported(self.func, self.hw)
            checks = dynamic_loops.runtime_checks(self.func)
            if checks:
                self.schedule.attributes["dim_checks"] = A.from_python(checks)
        for op in reversed(list(body)):
            # Nothing reads it: no kernel (all tensor ops and groups are pure).
            if op.results and not any(r.has_uses() for r in op.results) and not isinstance(op, F.CallOp):
                op.erase()
        for op in list(body):
            if not isinstance(op, (GroupOp, T.ConstantOp, T.ReshapeOp, F.ReturnOp)):
                if isinstance(op, F.CallOp):
                    raise error(op.location, f"lower-to-loops needs calls inlined; '@{op.callee}' is still called (run 'inline' first)")
                wrap_in_group(op, next_id())
        homes = self.homes(body.last_op)
        for op in body:
            if isinstance(op, T.ConstantOp):
                self.buffers[op.result] = self.b.create(loop.ConstantOp, [], {"value": op.attr("value")}).result
            elif isinstance(op, T.ReshapeOp):
                self.reshapes[op.result] = op.input  # a view, made when first used
            elif isinstance(op, GroupOp):
                self.lower_group(op, homes)
            elif isinstance(op, F.ReturnOp):
                self.finish(op, homes)
        self.schedule.attributes["arena_size"] = A.IntegerAttr(self.arena)
        self.schedule.attributes["plan.alignment"] = A.IntegerAttr(self.hw.buffer_alignment)
        if self.dynamic:
            self.schedule.attributes["arena_size"] = A.from_python(shape_expr.total([self.arena, *self.dynamic_arena]))
            dynamic_loops.erase_dims(self.schedule, self.kernels)

    def homes(self, ret: F.ReturnOp) -> dict[Value, int]:
        """Group results that are written straight into a result buffer."""
        homes: dict[Value, int] = {}
        for i, value in enumerate(ret.operands):
            root = value
            while isinstance(root.defining_op, T.ReshapeOp):
                root = root.defining_op.input
            if isinstance(root.defining_op, GroupOp) and root not in homes:
                homes[root] = i
        return homes

    def lower_group(self, group: GroupOp, homes: dict[Value, int]) -> None:
        kind = group.attr("kind")
        fn = TEMPLATES.get(kind)
        if fn is None:
            raise RuntimeError(f"no kernel template for group {group.attr('id')} of kind '{kind}' at {group.location} (registered: {', '.join(sorted(TEMPLATES))})")
        if self.allow_tf32 and kind == "matmul":  # the matmul template may then pick TF32 tensor cores (matmul_mma.py)
            group.attributes[ALLOW_TF32] = A.BoolAttr(True)
        # A group identical to one lowered before (the same layer again)
        # launches that group's kernels: templates see only the group.
        key = structural_key(group, ("id",))
        if dynamic_loops.is_dynamic(group):  # `?` prints alike: sizes that differ must not share kernels
            key = (key, dynamic_loops.shapes_key(group))
        lowered = self.lowered.get(key)
        first = lowered is None
        if first:
            try:
                # A group whose results are all empty computes nothing: no kernel
                # (templates index blocks by sizes that are 0 here).
                empty = all(r.type.num_elements == 0 for r in group.results)
                lowered = self.lowered[key] = LoweredGroup() if empty else fn(group, self.hw)
            except (LoweringError, TypeError) as exc:
                if dynamic_loops.is_dynamic(group):  # a template that cannot take these `?` sizes yet
                    raise dynamic_loops.not_supported(group, exc, self.hw) from None
                if not isinstance(exc, LoweringError):
                    raise
                # Fusion forms only groups the templates can lower, so this is fusecc's bug.
                refused = error(group.location, f"cannot lower group {group.attr('id')} ({kind}): {exc}")
                raise located_bug("the lowering", refused, "fusion formed a group its lowering cannot lower; this is a compiler bug") from None
        outputs = self.schedule.output_args
        for result in group.results:
            home = homes.get(result)
            t = memref_for(result.type)
            self.buffers[result] = self.view(outputs[home], t) if home is not None else self.arena_buffer(t)
        scratch: list[Value] = []
        for launch in lowered.launches:
            for ref in launch.args:
                if ref.source == "scratch":
                    while len(scratch) <= ref.index:
                        scratch.append(self.arena_buffer(lowered.scratch[len(scratch)], "scratch"))
            args = [self.arg(group, ref, scratch) for ref in launch.args]
            kernel = launch.kernel
            if first:
                name_arguments(kernel, group, launch.args)
                kernel.attributes["sym_name"] = A.StringAttr(self.names.claim(kernel.sym_name))
                for estimate in ESTIMATES:  # what fusion and tiling assumed this kernel needs, unless it has its own
                    if estimate in group.attributes and estimate not in kernel.attributes:
                        kernel.attributes[estimate] = group.attributes[estimate]
                self.kernels.append(kernel)
            attributes = {"kernel": A.SymbolRefAttr(kernel.sym_name)}
            if group.attr("id") not in (None, kernel.attr("group")):  # a kernel lowered for an identical group: say which this launch computes
                attributes["group"] = group.attributes["id"]
            self.b.create(loop.LaunchOp, args, attributes)

    def arg(self, group: GroupOp, ref: ArgRef, scratch: list[Value]) -> Value:
        if ref.source == "input":
            return self.buffer(group.operands[ref.index])
        if ref.source == "output":
            return self.buffer(group.results[ref.index])
        return scratch[ref.index]

    def finish(self, ret: F.ReturnOp, homes: dict[Value, int]) -> None:
        outputs = self.schedule.output_args
        for i, value in enumerate(ret.operands):
            root = value
            while isinstance(root.defining_op, T.ReshapeOp):
                root = root.defining_op.input
            if homes.get(root) != i:
                self.b.create(loop.CopyOp, [self.buffer(value), outputs[i]])
        self.b.create(loop.ReturnOp)


def name_arguments(kernel: loop.KernelOp, group: GroupOp, refs: list[ArgRef]) -> None:
    """Kernel arguments named after what they hold: the group's input names,
    `out<i>`, `scratch<i>` (unless the template named them)."""
    for arg, ref in zip(kernel.body.args, refs):
        if arg.name_hint is not None:
            continue
        if ref.source == "input":
            arg.name_hint = group.body.args[ref.index].name_hint or f"in{ref.index}"
        else:
            arg.name_hint = f"{'out' if ref.source == 'output' else 'scratch'}{ref.index}"


def align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


@dataclass(frozen=True)
class LowerToLoops(Pass):
    """Fusion groups to loop kernels, functions to host schedules."""

    name = "lower-to-loops"
    summary = "Lower fused functions to loop kernels and a host schedule each (naive arena plan)"
    anchor = "builtin.module"

    target: str = ""  # the hardware to lower for; "" takes the context's
    allow_tf32: bool = False  # f32 matmuls may use TF32 tensor cores (or the context's allow_tf32)

    def run(self, module: Operation, context: PassContext) -> None:
        hw = pass_hardware(self, module, context)
        allow_tf32 = self.allow_tf32 or context.allow_tf32
        load_templates()
        functions = [op for op in module.body if isinstance(op, F.FuncOp)]
        names = Names(op.attr("sym_name") for op in module.body if op.attributes.get("sym_name") is not None)
        ids = [op.attr("id") for f in functions for op in f.body if isinstance(op, GroupOp) and op.attr("id") is not None]
        counter = iter(range(max(ids, default=-1) + 1, 1 << 62))
        for f in functions:
            for op in f.body:
                if isinstance(op, GroupOp) and op.attr("id") is None:
                    op.attributes["id"] = A.IntegerAttr(next(counter))
        for f in functions:
            lowering = FunctionLowering(f, hw, names, allow_tf32)
            lowering.run(lambda: next(counter))
            for kernel in lowering.kernels:
                module.body.insert_before(kernel, f)
            module.body.insert_before(lowering.schedule, f)
            f.erase()


__all__ = ["LowerToLoops", "align", "fusion_kind", "load_templates", "wrap_in_group"]
