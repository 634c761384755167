"""The CPU backend's driver: one `loop.kernel` as one LLVM function.

    define void @"k"(ptr noalias align 64 dereferenceable(N) %a0, ..., i64 %begin, i64 %end)

The kernel's top-level `worker` loop is outlined: the function runs worker
iterations [begin, end), so the runtime splits a launch over cores by
calling it on sub-ranges. A kernel without exactly one top-level worker loop
(beside side-effect-free code) runs whole when begin < end (extent 1).

`vector` loops are widened here, explicitly (LLVM's loop vectoriser only
vectorises innermost loops, and the loop IR puts sequential loops inside
vector loops). The body is emitted once per chunk of W lanes: values that do
not depend on the lane stay scalar, index values `base + stride * lane` are
tracked symbolically (index_math.py), the rest become `<W x T>` values;
`loop.if` on a lane-dependent condition runs both branches under masks;
leftover iterations run as scalar code. A body that cannot be widened
becomes a scalar loop with `llvm.loop.vectorize.enable`, as does every
vector loop with `vectorize="llvm"`. Each `arith`/`math` op is one entry of
op_table.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusecc.compiler.diagnostics import error
from fusecc.compiler.ir import Block, Operation, Value
from fusecc.compiler.types import MemRefType
from fusecc.dialects import loop
from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.backends.host_extent import host_extent
from fusecc.passes.backends.llvm.analysis import (
    UNKNOWN_TRIPS,
    ArgFacts,
    NotWidenable,
    body_element_bytes,
    carries_float_extremum,
    choose_width,
    estimate_work,
    has_side_effects,
    moves_data_only,
    varying_values,
)
from fusecc.passes.backends.llvm.index_math import IndexMath
from fusecc.passes.backends.llvm.memory import MemoryAccess
from fusecc.passes.backends.llvm.op_table import TABLE
from fusecc.passes.backends.llvm.text import LINEAR, REGISTER, UNIFORM, VECTOR, Buffer, FunctionBuilder, ModuleBuilder, Val, const_val, is_literal, vty
from fusecc.passes.backends.table import handler_for


@dataclass(frozen=True)
class KernelABI:
    """How the runtime calls one compiled kernel."""

    name: str  # the loop.kernel's symbol
    params: tuple  # the kernel's argument types (memrefs are pointers)
    alignments: tuple  # byte alignment each pointer argument must have (1 for scalars)
    worker_extent: object  # the function runs worker iterations [begin, end) of [0, worker_extent):
    # an int, or (dynamic shapes) a ShapeExpr over `a{i}_{axis}`, argument i's size along axis
    work_per_iteration: int  # estimated scalar operations per worker iteration


class KernelEmitter(MemoryAccess, IndexMath):
    def __init__(self, mb: ModuleBuilder, kernel: loop.KernelOp, facts, hardware: Hardware, vectorize: str, isa: frozenset = frozenset()):
        self.mb = mb
        self.kernel = kernel
        self.facts = facts
        self.vectorize = vectorize
        self.isa = isa
        self.register_bytes = hardware.warp_size * 4  # the CPU entry's warp_size is f32 lanes per register
        self.fb = FunctionBuilder(mb)
        self.values: dict[Value, Val] = {}
        self.buffers: dict[Value, Buffer] = {}
        self.width = 1
        self.mask: Val | None = None  # lanes active under lane-dependent `loop.if`s
        self.varying: set[Value] = set()
        self.constants = 0

    # --- function --------------------------------------------------------------
    def emit(self) -> KernelABI:
        kernel = self.kernel
        if kernel.is_gpu:
            raise error(kernel.location, f"kernel @{kernel.sym_name} uses GPU mappings (block/thread); the CPU target needs worker/vector loops")
        for op in kernel.walk():
            if isinstance(op, loop.AllocOp) and op.result.type.memory_space == "shared":
                raise error(op.location, "shared buffers exist only in GPU kernels")
        params, alignments = [], []
        for i, arg in enumerate(kernel.body.args):
            if isinstance(arg.type, MemRefType):
                facts = self.facts[i] if self.facts else ArgFacts(True, arg.type.element_type.byte_size)
                align = max(facts.align, arg.type.element_type.byte_size)
                attrs = ("noalias " if facts.noalias else "") + f"align {align}"
                if arg.type.has_dynamic_shape:  # the sizes of its `?` axes follow the pointer
                    params.append(f"ptr {attrs} %a{i}")
                    params += [f"i64 %a{i}.d{axis}" for axis in arg.type.dynamic_axes]
                    sizes = tuple(Val(f"%a{i}.d{axis}", "i64", nonneg=True) if type(d) is not int else const_val(d) for axis, d in enumerate(arg.type.shape))
                    self.buffers[arg] = Buffer(f"%a{i}", arg.type, align, sizes)
                    alignments.append(align)
                    continue
                if arg.type.byte_size:  # LLVM refuses dereferenceable(0); an empty buffer is never read
                    attrs += f" dereferenceable({arg.type.byte_size})"
                params.append(f"ptr {attrs} %a{i}")
                self.buffers[arg] = Buffer(f"%a{i}", arg.type, align)
                alignments.append(align)
            else:
                alignments.append(1)
                params.append(f"{REGISTER[arg.type.name]} %a{i}")
                self.values[arg] = Val(f"%a{i}", REGISTER[arg.type.name])
        params += ["i64 %begin", "i64 %end"]

        body_ops = [op for op in kernel.body if not isinstance(op, loop.ReturnOp)]
        workers = [op for op in body_ops if isinstance(op, loop.ParallelOp) and "worker" in op.mapping]
        outlined = workers[0] if len(workers) == 1 and not any(has_side_effects(op) for op in body_ops if op is not workers[0]) else None

        fb = self.fb
        fb.begin("entry")
        alloca_slot = fb.placeholder()
        if outlined is None:
            run, done = fb.label("run"), fb.label("done")
            fb.cond_br(fb.emit("icmp slt i64 %begin, %end"), run, done)
            fb.begin(run)
        for op in body_ops:
            if op is outlined:
                self.emit_parallel(op, worker_range=("%begin", "%end"))
            else:
                self.emit_op(op)
        if outlined is None:
            fb.br(done)
            fb.begin(done)
        fb.do("ret void")
        fb.lines[alloca_slot] = "\n".join(fb.allocas)

        if outlined is not None:
            extent = outlined.extents[outlined.mapping.index("worker")]
            others = [u if isinstance(u, int) else UNKNOWN_TRIPS for u, m in zip(outlined.extents, outlined.mapping) if m != "worker"]
            work = max(1, estimate_work(outlined.body) * math.prod(others))
            if not isinstance(extent, int):
                extent = host_extent(extent, kernel)
        else:
            extent, work = 1, max(1, estimate_work(kernel.body))
        body = "\n".join(line for line in fb.lines if line != "")
        group = self.mb.attribute_group("nounwind optsize" if moves_data_only(kernel) else "nounwind")
        self.mb.functions.append(f'define void @"{kernel.sym_name}"({", ".join(params)}) {group} {{\n{body}\n}}\n')
        return KernelABI(kernel.sym_name, tuple(a.type for a in kernel.body.args), tuple(alignments), extent, work)

    # --- dispatch ----------------------------------------------------------------
    def emit_block(self, block: Block) -> list[Val]:
        """Emit a block's ops; returns the values its terminator yields."""
        for op in block:
            if isinstance(op, (loop.YieldOp, loop.ReturnOp)):
                return [self.get(v) for v in op.operands]
            self.emit_op(op)
        return []

    def emit_op(self, op: Operation) -> None:
        structure = STRUCTURE.get(op.name)
        if structure is not None:
            structure(self, op)
            return
        handler = handler_for(TABLE, op)
        if handler is None:
            raise error(op.location, f"the CPU backend cannot compile '{op.name}' on {op_types(op)} (is the IR legalized?)")
        handler(self, op)

    def get(self, v: Value) -> Val:
        return self.values[v]

    def bind(self, v: Value, val: Val) -> None:
        self.values[v] = val

    # --- vectors -------------------------------------------------------------------
    def full(self, scalar: str) -> str:
        return vty(scalar, self.width)

    def lit(self, scalar: str, literal: str, width: int | None = None) -> str:
        width = self.width if width is None else width
        return literal if width == 1 else f"splat ({scalar} {literal})"

    def splat(self, scalar: str, ref: str) -> str:
        if self.width == 1 or not ref.startswith("%"):
            return self.lit(scalar, ref)
        one = self.fb.emit(f"insertelement <1 x {scalar}> poison, {scalar} {ref}, i64 0")
        return self.fb.emit(f"shufflevector <1 x {scalar}> {one}, <1 x {scalar}> poison, <{self.width} x i32> zeroinitializer")

    def vec(self, v: Val) -> str:
        """`v` as a `<W x T>` operand."""
        if v.kind == VECTOR or self.width == 1:
            return v.ref
        if v.kind == LINEAR and is_literal(v.ref):
            return "<" + ", ".join(f"i64 {int(v.ref) + v.stride * k}" for k in range(self.width)) + ">"
        base = self.splat(v.ty, v.ref)
        if v.kind == UNIFORM:
            return base
        steps = ", ".join(f"i64 {v.stride * k}" for k in range(self.width))
        return self.fb.emit(f"add {self.full('i64')} {base}, <{steps}>")

    def uniform(self, ref: str, ty: str, **facts) -> Val:
        return Val(ref, ty, UNIFORM, **facts)

    def vector(self, ref: str, ty: str) -> Val:
        return Val(ref, ty, VECTOR)

    def lanes_of(self, vals) -> int:
        return self.width if any(v.kind != UNIFORM for v in vals) else 1

    # --- loops ---------------------------------------------------------------------
    def counted_loop(self, lower: str, upper: str, step: str, carried, body, metadata: str | None = None) -> list[str]:
        """for (iv = lower; iv < upper; iv += step) with loop-carried values
        `carried` = [(type, init)]; body(iv, args) -> yielded refs."""
        fb = self.fb
        preheader = fb.block
        header, inside, exit_ = fb.label("loop"), fb.label("body"), fb.label("exit")
        fb.br(header)
        fb.begin(header)
        iv = fb.fresh("i")
        args = [fb.fresh("c") for _ in carried]
        slots = [fb.placeholder() for _ in range(1 + len(carried))]
        fb.cond_br(fb.emit(f"icmp slt i64 {iv}, {upper}"), inside, exit_)
        fb.begin(inside)
        yielded = body(iv, args)
        following = fb.emit(f"add nsw i64 {iv}, {step}")
        latch = fb.block
        fb.br(header, f", !llvm.loop {metadata}" if metadata else "")
        fb.lines[slots[0]] = f"  {iv} = phi i64 [ {lower}, %{preheader} ], [ {following}, %{latch} ]"
        for slot, arg, (t, init), new in zip(slots[1:], args, carried, yielded):
            fb.lines[slot] = f"  {arg} = phi {t} [ {init}, %{preheader} ], [ {new}, %{latch} ]"
        fb.begin(exit_)
        return args

    def emit_for(self, op: loop.ForOp) -> None:
        lower, upper, step = (self.get(v) for v in op.operands[:3])
        if step.const is not None and step.const <= 0:
            raise error(op.location, f"loop.for has a non-positive step {step.const}")
        if any(v.kind != UNIFORM for v in (lower, upper, step)):
            raise error(op.location, "internal: lane-dependent loop bounds reached the emitter")
        kinds = [self.width > 1 and arg in self.varying for arg in op.iter_args]
        inits = [self.get(v) for v in op.inits]
        carried = [(self.full(v.ty) if k else v.ty, self.vec(v) if k else v.ref) for v, k in zip(inits, kinds)]
        iv_facts = dict(multiple=math.gcd(lower.multiple, step.const) if step.const is not None else 1, nonneg=lower.nonneg)

        def body(iv, args):
            self.bind(op.induction_var, self.uniform(iv, "i64", **iv_facts))
            for arg, ref, init, k in zip(op.iter_args, args, inits, kinds):
                self.bind(arg, Val(ref, init.ty, VECTOR if k else UNIFORM))
            yielded = self.emit_block(op.body)
            return [self.vec(v) if k else v.ref for v, k in zip(yielded, kinds)]

        unroll = op.attr("unroll")
        unroll = unroll if unroll and unroll > 1 else None
        # LLVM 22's loop vectoriser drops the scalar remainder of a maxnum/minnum
        # reduction it vectorises with its NaN check (a row of 5: max of the first
        # 4), so a scalar loop that carries one is kept from it (docs/cpu-target.md)
        forbid = self.width == 1 and carries_float_extremum(op)
        metadata = self.mb.loop_metadata(vectorize=False if forbid else None, unroll=unroll) if (unroll or forbid) else None
        refs = self.counted_loop(lower.ref, upper.ref, step.ref, carried, body, metadata)
        for result, ref, init, k in zip(op.results, refs, inits, kinds):
            self.bind(result, Val(ref, init.ty, VECTOR if k else UNIFORM))

    def emit_parallel(self, op: loop.ParallelOp, worker_range=None) -> None:
        if op.maps_blocks or op.maps_threads:
            raise error(op.location, "GPU-mapped loops cannot run on the CPU")
        dims = [(u if isinstance(u, int) else self.get(u), m, a) for u, m, a in zip(op.extents, op.mapping, op.body.args)]
        dims.sort(key=lambda d: {"worker": 0, "vector": 2}.get(d[1], 1))

        def nest(i: int) -> None:
            if i == len(dims):
                self.emit_block(op.body)
                return
            extent, mapping, arg = dims[i]
            if mapping == "vector" and self.width == 1 and i == len(dims) - 1:
                self.emit_vector_loop(extent, arg, op.body)
                return
            lower, upper = worker_range if (mapping == "worker" and worker_range) else ("0", str(extent) if isinstance(extent, int) else extent.ref)

            def body(iv, _):
                self.bind(arg, self.uniform(iv, "i64", nonneg=True))
                nest(i + 1)
                return []

            self.counted_loop(lower, upper, "1", [], body)

        nest(0)

    def emit_vector_loop(self, extent, lane_iv: Value, body: Block) -> None:
        lanes = max(1, self.register_bytes // body_element_bytes(body))
        if not isinstance(extent, int):
            self.emit_dynamic_vector_loop(extent, lanes, lane_iv, body)
            return
        width = choose_width(extent, lanes) if self.vectorize == "explicit" else 1
        varying = None
        if width > 1:
            try:
                varying = varying_values(body, lane_iv)
            except NotWidenable:
                width = 1
        if width == 1:
            self.scalar_loop(0, extent, lane_iv, body, self.mb.loop_metadata())
            return
        main = extent - extent % width
        saved = (self.width, self.varying, self.mask)
        self.width, self.varying, self.mask = width, varying, None
        if main == width:
            self.bind(lane_iv, Val("0", "i64", LINEAR, stride=1, multiple=0, nonneg=True))
            self.emit_block(body)
        else:

            def chunk(iv, _):
                self.bind(lane_iv, Val(iv, "i64", LINEAR, stride=1, multiple=width, nonneg=True))
                self.emit_block(body)
                return []

            self.counted_loop("0", str(main), str(width), [], chunk)
        self.width, self.varying, self.mask = saved
        if main < extent:
            self.scalar_loop(main, extent, lane_iv, body, None)

    def emit_dynamic_vector_loop(self, extent: Val, lanes: int, lane_iv: Value, body: Block) -> None:
        """A vector loop whose extent is known at run time: chunks of one
        register while whole ones fit, then scalar code for the rest."""
        width = lanes if self.vectorize == "explicit" and lanes > 1 else 1
        varying = None
        if width > 1:
            try:
                varying = varying_values(body, lane_iv)
            except NotWidenable:
                width = 1
        if width == 1:
            self.scalar_loop("0", extent.ref, lane_iv, body, self.mb.loop_metadata())
            return
        main = self.fb.emit(f"sub i64 {extent.ref}, {self.fb.emit(f'urem i64 {extent.ref}, {width}')}")
        saved = (self.width, self.varying, self.mask)
        self.width, self.varying, self.mask = width, varying, None

        def chunk(iv, _):
            self.bind(lane_iv, Val(iv, "i64", LINEAR, stride=1, multiple=width, nonneg=True))
            self.emit_block(body)
            return []

        self.counted_loop("0", main, str(width), [], chunk)
        self.width, self.varying, self.mask = saved
        self.scalar_loop(main, extent.ref, lane_iv, body, None)

    def emit_dim(self, op: loop.DimOp) -> None:
        buf = self.buffers[op.source]
        size = buf.type.shape[op.axis]
        self.bind(op.result, const_val(size) if type(size) is int else buf.sizes[op.axis])

    def scalar_loop(self, lower, upper, iv_value: Value, body: Block, metadata) -> None:
        def run(iv, _):
            self.bind(iv_value, self.uniform(iv, "i64", nonneg=True))
            self.emit_block(body)
            return []

        self.counted_loop(str(lower), str(upper), "1", [], run, metadata)

    def emit_if(self, op: loop.IfOp) -> None:
        cond = self.get(op.condition)
        fb = self.fb
        if cond.kind == UNIFORM:
            kinds = [self.width > 1 and r in self.varying for r in op.results]
            then, otherwise, merge = fb.label("then"), fb.label("else"), fb.label("endif")
            fb.cond_br(cond.ref, then, otherwise)
            incoming = []
            for label, block in ((then, op.then_block), (otherwise, op.else_block)):
                fb.begin(label)
                values = self.emit_block(block)
                refs = [self.vec(v) if k else v.ref for v, k in zip(values, kinds)]
                incoming.append((refs, fb.block, values))
                fb.br(merge)
            fb.begin(merge)
            for k, result in enumerate(op.results):
                sample = incoming[0][2][k]
                t = self.full(sample.ty) if kinds[k] else sample.ty
                ref = fb.emit(f"phi {t} [ {incoming[0][0][k]}, %{incoming[0][1]} ], [ {incoming[1][0][k]}, %{incoming[1][1]} ]")
                self.bind(result, Val(ref, sample.ty, VECTOR if kinds[k] else UNIFORM))
            return
        # Lane-dependent condition: both branches run, side effects masked.
        saved = self.mask
        c = self.vec(cond)
        not_c = fb.emit(f"xor {self.full('i1')} {c}, {self.lit('i1', 'true')}")
        branches = []
        for lanes in (c, not_c):
            m = lanes if saved is None else fb.emit(f"and {self.full('i1')} {saved.ref}, {lanes}")
            self.mask = self.vector(m, "i1")
            branches.append(self.emit_block(op.then_block if lanes is c else op.else_block))
        self.mask = saved
        for result, a, b in zip(op.results, *branches):
            t = self.full(a.ty)
            self.bind(result, self.vector(fb.emit(f"select {self.full('i1')} {c}, {t} {self.vec(a)}, {t} {self.vec(b)}"), a.ty))

    # --- buffers ---------------------------------------------------------------------


def op_types(op: Operation) -> str:
    return ", ".join(str(v.type) for v in op.operands) or str(op.results[0].type)


STRUCTURE = {
    "loop.for": KernelEmitter.emit_for,
    "loop.parallel": KernelEmitter.emit_parallel,
    "loop.if": KernelEmitter.emit_if,
    "loop.load": KernelEmitter.emit_load,
    "loop.store": KernelEmitter.emit_store,
    "loop.prefetch": KernelEmitter.emit_prefetch,
    "loop.alloc": KernelEmitter.emit_alloc,
    "loop.constant": KernelEmitter.emit_constant_buffer,
    "loop.view": KernelEmitter.emit_view,
    "loop.dim": KernelEmitter.emit_dim,
}
