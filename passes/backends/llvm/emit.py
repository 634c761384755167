"""The loop level as LLVM IR text, for the CPU target.

Each `loop.kernel` becomes one function

    define void @"k"(ptr noalias align 64 dereferenceable(N) %a0, ..., i64 %begin, i64 %end)

whose top-level `worker` loop is outlined: the function runs worker
iterations [begin, end), so the runtime splits a launch over cores by
calling it on sub-ranges. A kernel without exactly one top-level worker loop
(beside side-effect-free code) runs whole when begin < end (extent 1).

`vector` loops are widened here, explicitly, rather than left to LLVM's
loop vectoriser, which only vectorises innermost loops: the loop IR puts
sequential loops inside vector loops (per-lane partial sums of a reduction,
the K loop of a matmul micro-kernel), and those must become SIMD too. The
body is emitted once per chunk of W lanes: values that do not depend on the
lane stay scalar (and are splatted where needed), index values `base +
stride * lane` are tracked symbolically so accesses contiguous in the lane
become vector loads/stores (others gathers/scatters), and the rest become
`<W x T>` values. `loop.if` on a lane-dependent condition executes both
branches under masks; leftover iterations run as scalar code. A vector body
that cannot be widened (lane-dependent loop bounds, per-iteration buffers)
becomes a scalar loop with `llvm.loop.vectorize.enable`, as does every
vector loop with `vectorize="llvm"`. docs/cpu-target.md compares the two.

Numbers match the loop interpreter: no fast-math flags, no FMA contraction
and no reassociation (a `loop.for` accumulator stays in program order; a
vectorised reduction is written in the loop IR as per-lane partial sums).
exp/log/tanh/erf are inline polynomial expansions (llvm_math.py), integer
division truncates and never traps (a zero divisor gives an unspecified
value where the interpreter reports an error), bf16 values live as f32
rounded to bf16 after each operation, as the interpreter keeps them.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Collection

import numpy as np

from fusecc.compiler.diagnostics import error
from fusecc.passes.backends.hardware import CPU, Hardware
from fusecc.compiler.ir import Block, Operation, Value
from fusecc.compiler.types import MemRefType, ScalarType, bf16, f16, f64, i1, index
from fusecc.dialects import loop
from fusecc.runtime.reference import round_bf16

from fusecc.passes.backends.llvm import math_functions as llvm_math

VECTORIZE_MODES = ("explicit", "llvm")

REGISTER = {"f32": "float", "f64": "double", "f16": "half", "bf16": "float", "i1": "i1", "i8": "i8", "i32": "i32", "i64": "i64", "index": "i64"}
STORAGE = dict(REGISTER, bf16="i16", i1="i8")
MANGLE = {"float": "f32", "double": "f64", "half": "f16", "i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "ptr": "p0"}
BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64}

# A vector loop of 1, 2 or 4 registers' worth of lanes is done in one chunk
# (the loop IR asks for that unroll by writing a wider vector loop, e.g. a
# 32-column matmul tile); other extents go in chunks of one register.
WHOLE_LOOP_REGISTERS = (1, 2, 4)


@dataclass(frozen=True)
class KernelABI:
    """How the runtime calls one compiled kernel."""

    name: str  # the loop.kernel's symbol
    params: tuple  # the kernel's argument types (memrefs are pointers)
    alignments: tuple  # byte alignment each pointer argument must have (1 for scalars)
    worker_extent: int  # the function runs worker iterations [begin, end) of [0, worker_extent)
    work_per_iteration: int  # estimated scalar operations per worker iteration


@dataclass
class LLVMProgram:
    text: str
    kernels: dict[str, KernelABI]


def emit_llvm(module: Operation, hardware: Hardware = CPU, vectorize: str = "explicit", only: Collection[str] | None = None, isa: frozenset = frozenset()) -> LLVMProgram:
    """LLVM IR for every CPU kernel of a loop-level module (or the kernels
    named in `only`, as the whole module's build has them). `isa`:
    instruction set extensions of the host (LLVM feature names, e.g.
    "avx512f") that the math expansions may use directly; without them the
    IR is portable."""
    if vectorize not in VECTORIZE_MODES:
        raise ValueError(f"vectorize must be one of {VECTORIZE_MODES}, not {vectorize!r}")
    facts = argument_facts(module)
    mb = ModuleBuilder()
    kernels = {}
    for op in module.body:
        if isinstance(op, loop.KernelOp) and (only is None or op.sym_name in only):
            emitter = KernelEmitter(mb, op, facts.get(op.sym_name), hardware, vectorize, frozenset(isa))
            kernels[op.sym_name] = emitter.emit()
    return LLVMProgram(mb.text(), kernels)


def emit_llvm_text(module: Operation, *, isa: frozenset[str] | None = None) -> str:
    """The `--emit=llvm` level: the IR that `fusecc run` compiles, for the
    `isa` extensions (default: this host's)."""
    from fusecc.passes.backends.llvm.host import host_isa

    return emit_llvm(module, isa=host_isa() if isa is None else isa).text


# --------------------------------------------------------------------------- text builders


def float_literal(value, scalar: str) -> str:
    if scalar == "half":
        return "0xH%04X" % int(np.array([value], dtype=np.float16).view(np.uint16)[0])
    if scalar == "float":
        return llvm_math.f32_literal(value)
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(value)))[0]


def vty(scalar: str, width: int) -> str:
    return scalar if width == 1 else f"<{width} x {scalar}>"


def mangle(scalar: str, width: int) -> str:
    return MANGLE[scalar] if width == 1 else f"v{width}{MANGLE[scalar]}"


def is_literal(ref: str) -> bool:
    return not ref.startswith("%")


class ModuleBuilder:
    def __init__(self):
        self.functions: list[str] = []
        self.globals: list[str] = []
        self.declarations: dict[str, str] = {}
        self.metadata: list[str] = []

    def declare(self, name: str, ret: str, arg_types) -> str:
        if name not in self.declarations:
            self.declarations[name] = f"declare {ret} @{name}({', '.join(arg_types)})"
        return f"@{name}"

    def loop_metadata(self, vectorize: bool = True, unroll: int | None = None) -> str:
        """A loop ID: ask LLVM's loop vectoriser to vectorise, and/or to
        unroll `unroll` times (`loop.for {unroll = N}`)."""
        loop_id = len(self.metadata)
        properties = []
        if vectorize:
            properties.append('!{!"llvm.loop.vectorize.enable", i1 true}')
        if unroll:
            properties.append(f'!{{!"llvm.loop.unroll.count", i32 {unroll}}}')
        ids = [f"!{loop_id + 1 + k}" for k in range(len(properties))]
        self.metadata.append(f"!{loop_id} = distinct !{{!{loop_id}, {', '.join(ids)}}}")
        self.metadata += [f"{name} = {text}" for name, text in zip(ids, properties)]
        return f"!{loop_id}"

    def text(self) -> str:
        parts = ["; fusecc: loop-level kernels for the CPU", ""]
        parts += self.globals + ([""] if self.globals else [])
        parts += self.functions
        parts += sorted(self.declarations.values())
        parts += ["", "attributes #0 = { nounwind }"]
        parts += self.metadata
        return "\n".join(parts) + "\n"


class FunctionBuilder:
    def __init__(self, mb: ModuleBuilder):
        self.mb = mb
        self.allocas: list[str] = []
        self.lines: list[str] = []
        self.count = 0
        self.block = "entry"

    def fresh(self, hint: str = "v") -> str:
        self.count += 1
        return f"%{hint}{self.count}"

    def emit(self, rhs: str, hint: str = "v") -> str:
        name = self.fresh(hint)
        self.lines.append(f"  {name} = {rhs}")
        return name

    def do(self, text: str) -> None:
        self.lines.append(f"  {text}")

    def label(self, hint: str) -> str:
        self.count += 1
        return f"{hint}{self.count}"

    def begin(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.block = label

    def br(self, label: str, suffix: str = "") -> None:
        self.do(f"br label %{label}{suffix}")

    def cond_br(self, cond: str, then: str, otherwise: str) -> None:
        self.do(f"br i1 {cond}, label %{then}, label %{otherwise}")

    def placeholder(self) -> int:
        self.lines.append("")
        return len(self.lines) - 1

    def intrinsic(self, name: str, ret: str, arg_types) -> str:
        return self.mb.declare(name, ret, arg_types)

    def call(self, name: str, ret: str, args: list[tuple[str, str]]) -> str:
        callee = self.intrinsic(name, ret, [t.split(" align ")[0] for t, _ in args])
        text = f"call {ret} {callee}({', '.join(f'{t} {a}' for t, a in args)})"
        if ret == "void":
            self.do(text)
            return ""
        return self.emit(text)


# --------------------------------------------------------------------------- values

UNIFORM, LINEAR, VECTOR = 0, 1, 2


@dataclass(frozen=True)
class Val:
    """An emitted value. UNIFORM: one scalar for all lanes; VECTOR: `<W x ty>`;
    LINEAR (index only): `ref + stride * lane`, ref the scalar base.
    Index facts: the (base) value is a multiple of `multiple` (0: it is 0)
    and, with `nonneg`, not negative."""

    ref: str
    ty: str
    kind: int = UNIFORM
    stride: int = 0
    multiple: int = 1
    nonneg: bool = False
    const: object = None


def const_val(value: int, ty: str = "i64") -> Val:
    return Val(str(value), ty, multiple=abs(value), nonneg=value >= 0, const=value)


@dataclass(frozen=True)
class Buffer:
    ptr: str
    type: MemRefType
    align: int


def low_bit(n: int) -> int:
    """The largest power of two dividing n (a large one for 0)."""
    return n & -n if n else 1 << 30


# --------------------------------------------------------------------------- module-level facts


@dataclass(frozen=True)
class ArgFacts:
    noalias: bool
    align: int


def argument_facts(module: Operation) -> dict[str, list[ArgFacts]]:
    """Per kernel argument: may it be `noalias`, and its alignment, from
    every launch of the kernel in the module's schedules. Schedule outputs
    and the arena are 64-byte aligned by the runtime; inputs are the
    caller's arrays (element-aligned); constants of the schedule get their
    own aligned buffers. A kernel never launched here gets noalias and
    element alignment."""
    facts: dict[str, list[ArgFacts]] = {}
    kernels = {op.sym_name: op for op in module.body if isinstance(op, loop.KernelOp)}
    for schedule in module.body:
        if not isinstance(schedule, loop.ScheduleOp):
            continue
        where: dict[Value, tuple] = {}  # value -> (root, byte offset, byte end, alignment)
        n_inputs = len(schedule.inputs)
        for i, arg in enumerate(schedule.body.args):
            align = arg.type.element_type.byte_size if i < n_inputs else 64
            where[arg] = (("arg", i), 0, arg.type.byte_size, align)
        for op in schedule.body:
            if isinstance(op, loop.ConstantOp):  # the runtime gives each its own 64-byte aligned buffer
                where[op.result] = (("const", id(op)), 0, op.result.type.byte_size, 64)
            elif isinstance(op, loop.ArenaViewOp):
                where[op.result] = ("arena", op.offset, op.offset + op.result.type.byte_size, min(64, low_bit(op.offset)))
            elif isinstance(op, loop.ViewOp) and op.source in where:
                root, start, _, align = where[op.source]
                begin = start + op.offset
                where[op.result] = (root, begin, begin + op.result.type.byte_size, min(align, low_bit(op.offset)))
            elif isinstance(op, loop.LaunchOp) and op.kernel_name in kernels:
                kernel = kernels[op.kernel_name]
                written = written_arguments(kernel)
                places = [where.get(v) for v in op.operands]
                previous = facts.get(op.kernel_name)
                current = []
                for i, (arg, place) in enumerate(zip(kernel.body.args, places)):
                    noalias = isinstance(arg.type, MemRefType) and place is not None
                    for j, other in enumerate(places):
                        if j == i or place is None or other is None:
                            continue
                        overlap = place[0] == other[0] and place[1] < other[2] and other[1] < place[2]
                        if overlap and (i in written or j in written):
                            noalias = False
                    align = place[3] if place is not None else 1
                    if previous is not None:
                        noalias = noalias and previous[i].noalias
                        align = min(align, previous[i].align)
                    current.append(ArgFacts(noalias, align))
                facts[op.kernel_name] = current
    return facts


def written_arguments(kernel: loop.KernelOp) -> set[int]:
    """Indices of the kernel arguments some `loop.store` writes (through views)."""
    args = {arg: i for i, arg in enumerate(kernel.body.args)}
    written = set()
    for op in kernel.walk():
        if isinstance(op, loop.StoreOp):
            buffer = op.buffer
            while isinstance(buffer.defining_op, loop.ViewOp):
                buffer = buffer.defining_op.source
            if buffer in args:
                written.add(args[buffer])
    return written


def has_side_effects(op: Operation) -> bool:
    return any(isinstance(o, (loop.StoreOp, loop.BarrierOp)) for o in op.walk())


def estimate_work(block: Block) -> int:
    """Scalar operations executed by one run of `block`, loops multiplied out
    (loops with unknown trip counts count 16 iterations)."""
    total = 0
    for op in block:
        if isinstance(op, loop.ParallelOp):
            total += math.prod(op.upper) * estimate_work(op.body)
        elif isinstance(op, loop.ForOp):
            bounds = [constant_of(v) for v in op.operands[:3]]
            trips = 16 if None in bounds or bounds[2] <= 0 else max(0, -(-(bounds[1] - bounds[0]) // bounds[2]))
            total += trips * estimate_work(op.body)
        elif isinstance(op, loop.IfOp):
            total += max(estimate_work(op.then_block), estimate_work(op.else_block))
        else:
            total += 1
    return total


def constant_of(value: Value):
    op = value.defining_op
    if op is not None and op.name == "arith.constant":
        return op.attr("value").value
    return None


# --------------------------------------------------------------------------- vector-loop analysis


class NotWidenable(Exception):
    pass


def varying_values(body: Block, lane_iv: Value) -> set[Value]:
    """Values of a vector loop body that depend on the lane (a fixpoint over
    loop-carried values). Raises NotWidenable for bodies this emitter does
    not widen."""
    varying = {lane_iv}

    def mark(values, flag):
        changed = False
        for v in values:
            if flag and v not in varying:
                varying.add(v)
                changed = True
        return changed

    def visit(block: Block) -> None:
        for op in block:
            if isinstance(op, (loop.YieldOp, loop.ReturnOp)):
                continue
            if isinstance(op, (loop.BarrierOp, loop.ShuffleXorOp)):
                raise NotWidenable("GPU operation")
            if isinstance(op, loop.AllocOp):
                raise NotWidenable("a buffer allocated per lane")
            if isinstance(op, loop.ForOp):
                if any(v in varying for v in op.operands[:3]):
                    raise NotWidenable("lane-dependent loop bounds")
                carried = [v in varying for v in op.inits]
                while True:
                    for arg, flag in zip(op.iter_args, carried):
                        mark([arg], flag)
                    visit(op.body)
                    yielded = [v in varying for v in op.body.last_op.operands]
                    new = [a or b for a, b in zip(carried, yielded)]
                    if new == carried:
                        break
                    carried = new
                for result, flag in zip(op.results, carried):
                    mark([result], flag)
            elif isinstance(op, loop.ParallelOp):
                visit(op.body)
            elif isinstance(op, loop.IfOp):
                visit(op.then_block)
                visit(op.else_block)
                lane_dependent = op.condition in varying
                for k, result in enumerate(op.results):
                    flag = lane_dependent or op.then_block.last_op.operands[k] in varying or op.else_block.last_op.operands[k] in varying
                    mark([result], flag)
            else:
                mark(op.results, any(v in varying for v in op.operands))

    visit(body)
    return varying


def body_element_bytes(block: Block) -> int:
    """The widest element the body computes on (f16/bf16 compute as f32)."""
    widest = 4
    for op in block.parent_op.walk(include_self=False) if block.parent_op else []:
        for v in list(op.results) + list(op.operands):
            t = v.type
            if isinstance(t, MemRefType):
                t = t.element_type
            if isinstance(t, ScalarType) and t not in (index, i1):
                widest = max(widest, t.byte_size)
    return widest


def choose_width(extent: int, lanes: int) -> int:
    """Lanes per chunk: the whole loop when it is a few registers wide,
    else one register with a scalar remainder."""
    if extent % lanes == 0 and extent // lanes in WHOLE_LOOP_REGISTERS:
        return extent
    if extent >= lanes:
        return lanes
    if extent >= 4 and extent & (extent - 1) == 0:
        return extent
    return 1


# --------------------------------------------------------------------------- kernels


class KernelEmitter:
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
                attrs = ("noalias " if facts.noalias else "") + f"align {align} dereferenceable({arg.type.byte_size})"
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
            extent = outlined.upper[outlined.mapping.index("worker")]
            work = max(1, estimate_work(outlined.body) * math.prod(outlined.upper) // max(1, extent))
        else:
            extent, work = 1, max(1, estimate_work(kernel.body))
        body = "\n".join(line for line in fb.lines if line != "")
        self.mb.functions.append(f'define void @"{kernel.sym_name}"({", ".join(params)}) #0 {{\n{body}\n}}\n')
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
        handler = HANDLERS.get(op.name)
        if handler is None:
            raise error(op.location, f"the CPU backend cannot compile '{op.name}'")
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
        metadata = self.mb.loop_metadata(vectorize=False, unroll=unroll) if unroll and unroll > 1 else None
        refs = self.counted_loop(lower.ref, upper.ref, step.ref, carried, body, metadata)
        for result, ref, init, k in zip(op.results, refs, inits, kinds):
            self.bind(result, Val(ref, init.ty, VECTOR if k else UNIFORM))

    def emit_parallel(self, op: loop.ParallelOp, worker_range=None) -> None:
        if op.maps_blocks or op.maps_threads:
            raise error(op.location, "GPU-mapped loops cannot run on the CPU")
        dims = list(zip(op.upper, op.mapping, op.body.args))
        dims.sort(key=lambda d: {"worker": 0, "vector": 2}.get(d[1], 1))

        def nest(i: int) -> None:
            if i == len(dims):
                self.emit_block(op.body)
                return
            extent, mapping, arg = dims[i]
            if mapping == "vector" and self.width == 1 and i == len(dims) - 1:
                self.emit_vector_loop(extent, arg, op.body)
                return
            lower, upper = worker_range if (mapping == "worker" and worker_range) else ("0", str(extent))

            def body(iv, _):
                self.bind(arg, self.uniform(iv, "i64", nonneg=True))
                nest(i + 1)
                return []

            self.counted_loop(lower, upper, "1", [], body)

        nest(0)

    def emit_vector_loop(self, extent: int, lane_iv: Value, body: Block) -> None:
        lanes = max(1, self.register_bytes // body_element_bytes(body))
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

    def scalar_loop(self, lower: int, upper: int, iv_value: Value, body: Block, metadata) -> None:
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
    def emit_alloc(self, op: loop.AllocOp) -> None:
        t = op.result.type
        ptr = self.fb.fresh("buf")
        self.fb.allocas.append(f"  {ptr} = alloca [{t.num_elements} x {STORAGE[t.element_type.name]}], align 64")
        # The interpreter gives fresh buffers zeros; LLVM drops this when overwritten.
        self.fb.call("llvm.memset.p0.i64", "void", [("ptr align 64", ptr), ("i8", "0"), ("i64", str(t.byte_size)), ("i1", "false")])
        self.buffers[op.result] = Buffer(ptr, t, 64)

    def emit_constant_buffer(self, op: loop.ConstantOp) -> None:
        t = op.result.type
        array = op.attr("value").array
        if t.element_type is bf16:
            data = (round_bf16(array).view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            data = np.ascontiguousarray(array, dtype=np.dtype(t.element_type.numpy_dtype).newbyteorder("<")).tobytes()
        self.constants += 1
        name = f'@"{self.kernel.sym_name}.const{self.constants}"'
        body = "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}" for b in data)
        self.mb.globals.append(f'{name} = private unnamed_addr constant [{len(data)} x i8] c"{body}", align 64')
        self.buffers[op.result] = Buffer(name, t, 64)

    def emit_view(self, op: loop.ViewOp) -> None:
        source = self.buffers[op.source]
        ptr = source.ptr if op.offset == 0 else self.fb.emit(f"getelementptr inbounds i8, ptr {source.ptr}, i64 {op.offset}")
        self.buffers[op.result] = Buffer(ptr, op.result.type, min(source.align, low_bit(op.offset)))

    def flat_index(self, buf: Buffer, indices) -> Val:
        shape = buf.type.shape
        flat = const_val(0)
        stride = 1
        for axis in reversed(range(len(shape))):
            flat = self.ix_add(self.ix_mul(self.get(indices[axis]), const_val(stride)), flat)
            stride *= shape[axis]
        return flat

    def access_mask(self, op) -> Val | None:
        guard = self.get(op.guard) if op.guard is not None else None
        if self.mask is None:
            return guard
        if guard is None:
            return self.mask
        return self.vector(self.fb.emit(f"and {self.full('i1')} {self.mask.ref}, {self.vec(guard)}"), "i1")

    def any_lane(self, mask: Val) -> str:
        if mask.kind == UNIFORM:
            return mask.ref
        return self.fb.call(f"llvm.vector.reduce.or.{mangle('i1', self.width)}", "i1", [(self.full("i1"), mask.ref)])

    def pointer(self, buf: Buffer, flat: Val, inbounds: bool = True) -> str:
        if flat.const == 0 or flat.ref == "0":
            return buf.ptr
        return self.fb.emit(f"getelementptr {'inbounds ' if inbounds else ''}{STORAGE[buf.type.element_type.name]}, ptr {buf.ptr}, i64 {flat.ref}")

    def access_align(self, buf: Buffer, flat: Val) -> int:
        size = buf.type.element_type.byte_size
        return max(size, min(buf.align, size * low_bit(flat.multiple)))

    def guarded(self, cond: str, emit_inside, default: tuple[str, str] | None = None) -> str | None:
        """Run emit_inside() only when `cond`; with `default` = (type, value),
        return a phi of its result and the default."""
        fb = self.fb
        start = fb.block
        inside, after = fb.label("guard"), fb.label("guarded")
        fb.cond_br(cond, inside, after)
        fb.begin(inside)
        result = emit_inside()
        end = fb.block
        fb.br(after)
        fb.begin(after)
        if default is None:
            return None
        return fb.emit(f"phi {default[0]} [ {result}, %{end} ], [ {default[1]}, %{start} ]")

    def from_storage(self, t: ScalarType, ref: str, width: int) -> str:
        if t is bf16:
            wide = self.fb.emit(f"zext {vty('i16', width)} {ref} to {vty('i32', width)}")
            shifted = self.fb.emit(f"shl {vty('i32', width)} {wide}, {self.lit('i32', '16', width)}")
            return self.fb.emit(f"bitcast {vty('i32', width)} {shifted} to {vty('float', width)}")
        if t is i1:
            return self.fb.emit(f"icmp ne {vty('i8', width)} {ref}, {self.lit('i8', '0', width) if width > 1 else '0'}")
        return ref

    def to_storage(self, t: ScalarType, ref: str, width: int) -> str:
        if t is bf16:
            bits = self.fb.emit(f"bitcast {vty('float', width)} {ref} to {vty('i32', width)}")
            high = self.fb.emit(f"lshr {vty('i32', width)} {bits}, {self.lit('i32', '16', width)}")
            return self.fb.emit(f"trunc {vty('i32', width)} {high} to {vty('i16', width)}")
        if t is i1:
            return self.fb.emit(f"zext {vty('i1', width)} {ref} to {vty('i8', width)}")
        return ref

    def padding_literal(self, op, t: ScalarType) -> str:
        padding = op.attributes.get("padding")
        value = getattr(padding, "value", 0) if padding is not None else 0
        return self.scalar_literal(value, t)

    def scalar_literal(self, value, t: ScalarType) -> str:
        if t is i1:
            return "true" if value else "false"
        if t.is_float:
            if t is bf16:
                value = float(round_bf16(np.array([value], dtype=np.float32))[0])
            return float_literal(value, REGISTER[t.name])
        return str(int(value))

    def emit_load(self, op: loop.LoadOp) -> None:
        buf = self.buffers[op.buffer]
        t = buf.type.element_type
        reg, store_ty = REGISTER[t.name], STORAGE[t.name]
        flat = self.flat_index(buf, op.indices)
        mask = self.access_mask(op)
        pad = self.padding_literal(op, t)
        align = self.access_align(buf, flat)
        fb = self.fb
        if flat.kind == UNIFORM:

            def scalar_load():
                return self.from_storage(t, fb.emit(f"load {store_ty}, ptr {self.pointer(buf, flat)}, align {align}"), 1)

            if mask is None:
                self.bind(op.result, self.uniform(scalar_load(), reg))
                return
            value = self.guarded(self.any_lane(mask), scalar_load, (reg, pad))
            guard = self.get(op.guard) if op.guard is not None else None
            if guard is None or guard.kind == UNIFORM:
                self.bind(op.result, self.uniform(value, reg))
            else:
                t_full = self.full(reg)
                ref = fb.emit(f"select {self.full('i1')} {guard.ref}, {t_full} {self.splat(reg, value)}, {t_full} {self.lit(reg, pad)}")
                self.bind(op.result, self.vector(ref, reg))
            return
        W = self.width
        vt = vty(store_ty, W)
        pad_storage = self.storage_literal(t, pad)
        if flat.kind == LINEAR and flat.stride == 1:
            ptr = self.pointer(buf, flat, inbounds=mask is None)
            if mask is None:
                raw = fb.emit(f"load {vt}, ptr {ptr}, align {align}")
            else:
                raw = fb.call(
                    f"llvm.masked.load.{mangle(store_ty, W)}.p0", vt,
                    [(f"ptr align {align}", ptr), (self.full("i1"), self.vec(mask)), (vt, self.lit(store_ty, pad_storage))],
                )
        else:
            ptrs = fb.emit(f"getelementptr {store_ty}, ptr {buf.ptr}, {self.full('i64')} {self.vec(flat)}")
            all_lanes = self.lit("i1", "true")
            raw = fb.call(
                f"llvm.masked.gather.{mangle(store_ty, W)}.{mangle('ptr', W)}", vt,
                [(f"{self.full('ptr')} align {self.access_align(buf, const_val(1))}", ptrs),
                 (self.full("i1"), self.vec(mask) if mask is not None else all_lanes), (vt, self.lit(store_ty, pad_storage))],
            )
        self.bind(op.result, self.vector(self.from_storage(t, raw, W), reg))

    def storage_literal(self, t: ScalarType, register_literal: str) -> str:
        """A padding literal in the buffer's storage type."""
        if t is bf16:
            value = struct.unpack("<d", struct.pack("<Q", int(register_literal, 16)))[0]
            return str(int(np.array([value], dtype=np.float32).view(np.uint32)[0] >> 16))
        if t is i1:
            return "1" if register_literal == "true" else "0"
        return register_literal

    def emit_store(self, op: loop.StoreOp) -> None:
        buf = self.buffers[op.buffer]
        t = buf.type.element_type
        store_ty = STORAGE[t.name]
        value = self.get(op.value)
        flat = self.flat_index(buf, op.indices)
        mask = self.access_mask(op)
        align = self.access_align(buf, flat)
        fb = self.fb
        W = self.width
        if flat.kind == UNIFORM:
            if value.kind == UNIFORM:

                def scalar_store():
                    fb.do(f"store {store_ty} {self.to_storage(t, value.ref, 1)}, ptr {self.pointer(buf, flat)}, align {align}")

                if mask is None:
                    scalar_store()
                else:
                    self.guarded(self.any_lane(mask), scalar_store)
                return
            # Lanes store to one place: the last active lane's value lands last.
            vector = self.vec(value)
            if mask is None:
                lane = str(W - 1)
            else:
                m = self.vec(mask)
                bits = fb.emit(f"bitcast {self.full('i1')} {m} to i{W}")
                zeros = fb.call(f"llvm.ctlz.i{W}", f"i{W}", [(f"i{W}", bits), ("i1", "false")])
                lane = fb.emit(f"sub i{W} {W - 1}, {zeros}")
            last = fb.emit(f"extractelement {self.full(value.ty)} {vector}, i{W if mask is not None else 64} {lane}")

            def store_last():
                fb.do(f"store {store_ty} {self.to_storage(t, last, 1)}, ptr {self.pointer(buf, flat)}, align {align}")

            if mask is None:
                store_last()
            else:
                self.guarded(self.any_lane(mask), store_last)
            return
        data = self.to_storage(t, self.vec(value), W)
        vt = vty(store_ty, W)
        if flat.kind == LINEAR and flat.stride == 1:
            ptr = self.pointer(buf, flat, inbounds=mask is None)
            if mask is None:
                fb.do(f"store {vt} {data}, ptr {ptr}, align {align}")
            else:
                fb.call(f"llvm.masked.store.{mangle(store_ty, W)}.p0", "void", [(vt, data), (f"ptr align {align}", ptr), (self.full("i1"), self.vec(mask))])
            return
        ptrs = fb.emit(f"getelementptr {store_ty}, ptr {buf.ptr}, {self.full('i64')} {self.vec(flat)}")
        lanes = self.vec(mask) if mask is not None else self.lit("i1", "true")
        fb.call(
            f"llvm.masked.scatter.{mangle(store_ty, W)}.{mangle('ptr', W)}", "void",
            [(vt, data), (f"{self.full('ptr')} align {self.access_align(buf, const_val(1))}", ptrs), (self.full("i1"), lanes)],
        )

    # --- index arithmetic (lane-linear where possible) ---------------------------------
    def scalar_index_op(self, opcode: str, a: str, b: str) -> str:
        """`a opcode b` on i64 scalars, folded when both are literals."""
        if is_literal(a) and is_literal(b):
            x, y = int(a), int(b)
            return str({"add": x + y, "sub": x - y, "mul": x * y}[opcode])
        if opcode == "mul" and "0" in (a, b):
            return "0"
        if opcode == "mul" and (a == "1" or b == "1"):
            return b if a == "1" else a
        if opcode == "add" and (a == "0" or b == "0"):
            return b if a == "0" else a
        if opcode == "sub" and b == "0":
            return a
        return self.fb.emit(f"{opcode} i64 {a}, {b}")

    def ix_add(self, a: Val, b: Val, subtract: bool = False) -> Val:
        if a.const is not None and b.const is not None:
            return const_val(a.const - b.const if subtract else a.const + b.const)
        if a.kind == VECTOR or b.kind == VECTOR:
            return self.vector(self.fb.emit(f"{'sub' if subtract else 'add'} {self.full('i64')} {self.vec(a)}, {self.vec(b)}"), "i64")
        base = self.scalar_index_op("sub" if subtract else "add", a.ref, b.ref)
        stride = a.stride - b.stride if subtract else a.stride + b.stride
        nonneg = a.nonneg and (b.const == 0 if subtract else b.nonneg)
        return Val(base, "i64", LINEAR if stride else UNIFORM, stride, math.gcd(a.multiple, b.multiple), nonneg)

    def ix_mul(self, a: Val, b: Val) -> Val:
        if a.const is not None and b.const is not None:
            return const_val(a.const * b.const)
        if a.const is not None:
            a, b = b, a
        if b.const is not None and a.kind != VECTOR:
            c = b.const
            if c == 0:
                return const_val(0)
            base = self.scalar_index_op("mul", a.ref, str(c))
            stride = a.stride * c
            return Val(base, "i64", LINEAR if stride else UNIFORM, stride, a.multiple * abs(c), a.nonneg and c > 0)
        if a.kind == UNIFORM and b.kind == UNIFORM:
            ref = self.scalar_index_op("mul", a.ref, b.ref)
            return Val(ref, "i64", multiple=a.multiple * b.multiple, nonneg=a.nonneg and b.nonneg)
        return self.vector(self.fb.emit(f"mul {self.full('i64')} {self.vec(a)}, {self.vec(b)}"), "i64")

    def ix_divrem(self, a: Val, b: Val, rem: bool) -> Val | None:
        """Division/remainder by a positive constant, keeping lane-linearity
        when the lanes of a chunk cannot cross a multiple of the divisor."""
        c = b.const
        if c is None or c <= 0 or a.kind == VECTOR:
            return None
        if a.const is not None:
            q = abs(a.const) // c * (1 if a.const >= 0 else -1)
            return const_val(a.const - q * c if rem else q)
        if not a.nonneg:
            return None
        opcode = "urem" if rem else "udiv"
        if a.kind == UNIFORM:
            ref = self.fb.emit(f"{opcode} i64 {a.ref}, {c}")
            multiple = math.gcd(a.multiple, c) if rem else (a.multiple // c if a.multiple % c == 0 else 1)
            return Val(ref, "i64", multiple=multiple, nonneg=True)
        s = a.stride
        if s > 0 and s * (self.width - 1) < math.gcd(a.multiple, c):
            ref = self.fb.emit(f"{opcode} i64 {a.ref}, {c}")
            if rem:
                return Val(ref, "i64", LINEAR, s, math.gcd(a.multiple, c), True)
            return Val(ref, "i64", multiple=a.multiple // c if a.multiple % c == 0 else 1, nonneg=True)
        if s > 0 and s % c == 0 and a.multiple % c == 0:
            if rem:
                return const_val(0)
            ref = self.fb.emit(f"udiv exact i64 {a.ref}, {c}")
            return Val(ref, "i64", LINEAR, s // c, a.multiple // c, True)
        return None

    # --- scalar/vector arithmetic ----------------------------------------------------
    def emit_constant(self, op: Operation) -> None:
        t = op.result.type
        value = op.attr("value").value
        if t is index:
            self.bind(op.result, const_val(int(value)))
        else:
            self.bind(op.result, Val(self.scalar_literal(value, t), REGISTER[t.name], const=value if t.is_integer else None))

    def emit_binary(self, op: Operation) -> None:
        a, b = self.get(op.operands[0]), self.get(op.operands[1])
        t = op.operands[0].type
        name = op.name
        if t is index:
            result = None
            if name in ("arith.add", "arith.sub"):
                result = self.ix_add(a, b, subtract=name == "arith.sub")
            elif name == "arith.mul":
                result = self.ix_mul(a, b)
            elif name in ("arith.div", "arith.rem"):
                result = self.ix_divrem(a, b, rem=name == "arith.rem")
            if result is not None:
                self.bind(op.result, result)
                return
        width = self.lanes_of((a, b))
        ra, rb = (self.vec(a), self.vec(b)) if width > 1 else (a.ref, b.ref)
        ref = self.binary(name, t, ra, rb, width, b)
        facts = {}
        if t is index and width == 1 and name in ("arith.max", "arith.min"):
            facts = dict(multiple=math.gcd(a.multiple, b.multiple), nonneg=(a.nonneg or b.nonneg) if name == "arith.max" else (a.nonneg and b.nonneg))
        self.bind(op.result, Val(ref, REGISTER[t.name], VECTOR if width > 1 else UNIFORM, **facts))

    def binary(self, name: str, t: ScalarType, a: str, b: str, width: int, b_val: Val) -> str:
        reg = REGISTER[t.name]
        ty = vty(reg, width)
        fb = self.fb
        if t.is_float:
            if name in FLOAT_OPCODES:
                ref = fb.emit(f"{FLOAT_OPCODES[name]} {ty} {a}, {b}")
            else:
                ref = fb.call(f"llvm.{FLOAT_INTRINSICS[name]}.{mangle(reg, width)}", ty, [(ty, a), (ty, b)])
            if t is bf16 and name not in ("arith.max", "arith.min"):
                ref = self.round_bf16(ref, width)
            return ref
        if t is i1:
            opcode = {"arith.add": "or", "arith.sub": "xor", "arith.mul": "and", "arith.max": "or", "arith.min": "and",
                      "arith.and": "and", "arith.or": "or", "arith.xor": "xor", "arith.div": "and", "arith.rem": "xor"}[name]
            if name == "arith.rem":  # a % b over {0, 1}: 0 (b = 1) or the unspecified x % 0
                return self.lit("i1", "false", width)
            return fb.emit(f"{opcode} {ty} {a}, {b}")
        if name in INT_OPCODES:
            return fb.emit(f"{INT_OPCODES[name]} {ty} {a}, {b}")
        if name in ("arith.max", "arith.min"):
            return fb.call(f"llvm.{'smax' if name == 'arith.max' else 'smin'}.{mangle(reg, width)}", ty, [(ty, a), (ty, b)])
        # Integer division truncates toward zero and must never trap: a
        # divisor of 0 (an interpreter error) or -1 (INT_MIN / -1) is
        # replaced unless it is a known-safe constant.
        rem = name == "arith.rem"
        if b_val.const is not None and b_val.const not in (0, -1):
            return fb.emit(f"{'srem' if rem else 'sdiv'} {ty} {a}, {b}")
        zero, minus_one, one = (self.lit(reg, v, width) for v in ("0", "-1", "1"))
        bt = vty("i1", width)
        is_zero = fb.emit(f"icmp eq {ty} {b}, {zero}")
        is_minus_one = fb.emit(f"icmp eq {ty} {b}, {minus_one}")
        bad = fb.emit(f"or {bt} {is_zero}, {is_minus_one}")
        safe = fb.emit(f"select {bt} {bad}, {ty} {one}, {ty} {b}")
        ref = fb.emit(f"{'srem' if rem else 'sdiv'} {ty} {a}, {safe}")
        if rem:
            return ref
        negated = fb.emit(f"sub {ty} {zero}, {a}")
        return fb.emit(f"select {bt} {is_minus_one}, {ty} {negated}, {ty} {ref}")

    def round_bf16(self, ref: str, width: int) -> str:
        """Round f32 values to bf16 precision (nearest even; nan stays nan), as
        runtime.reference.round_bf16 does."""
        fb = self.fb
        it, ft, bt = vty("i32", width), vty("float", width), vty("i1", width)
        bits = fb.emit(f"bitcast {ft} {ref} to {it}")
        high = fb.emit(f"lshr {it} {bits}, {self.lit('i32', '16', width)}")
        odd = fb.emit(f"and {it} {high}, {self.lit('i32', '1', width)}")
        biased = fb.emit(f"add {it} {bits}, {self.lit('i32', '32767', width)}")
        biased = fb.emit(f"add {it} {biased}, {odd}")
        cleared = fb.emit(f"and {it} {biased}, {self.lit('i32', '-65536', width)}")
        rounded = fb.emit(f"bitcast {it} {cleared} to {ft}")
        is_nan = fb.emit(f"fcmp uno {ft} {ref}, {ref}")
        return fb.emit(f"select {bt} {is_nan}, {ft} {self.lit('float', '0x7FF8000000000000', width)}, {ft} {rounded}")

    def emit_neg(self, op: Operation) -> None:
        x = self.get(op.input)
        t = op.input.type
        ty = self.full(x.ty) if x.kind != UNIFORM else x.ty
        ref = self.vec(x) if x.kind != UNIFORM else x.ref
        if t.is_float:
            out = self.fb.emit(f"fneg {ty} {ref}")
        elif t is i1:
            out = ref
        else:
            out = self.fb.emit(f"sub {ty} {self.lit(x.ty, '0', self.lanes_of((x,)))}, {ref}")
        self.bind(op.result, Val(out, x.ty, VECTOR if x.kind != UNIFORM else UNIFORM))

    def emit_cmp(self, op: Operation) -> None:
        a, b = self.get(op.lhs), self.get(op.rhs)
        t = op.lhs.type
        width = self.lanes_of((a, b))
        ra, rb = (self.vec(a), self.vec(b)) if width > 1 else (a.ref, b.ref)
        ty = vty(REGISTER[t.name], width)
        if t.is_float:
            text = f"fcmp {FLOAT_PREDICATES[op.predicate]} {ty} {ra}, {rb}"
        else:
            predicates = UNSIGNED_PREDICATES if t is i1 else SIGNED_PREDICATES
            text = f"icmp {predicates[op.predicate]} {ty} {ra}, {rb}"
        self.bind(op.result, Val(self.fb.emit(text), "i1", VECTOR if width > 1 else UNIFORM))

    def emit_select(self, op: Operation) -> None:
        c, a, b = self.get(op.condition), self.get(op.true_value), self.get(op.false_value)
        width = self.lanes_of((c, a, b))
        if width == 1:
            ref = self.fb.emit(f"select i1 {c.ref}, {a.ty} {a.ref}, {a.ty} {b.ref}")
            self.bind(op.result, Val(ref, a.ty))
            return
        ct = self.full("i1") if c.kind != UNIFORM else "i1"
        t = self.full(a.ty)
        ref = self.fb.emit(f"select {ct} {self.vec(c) if c.kind != UNIFORM else c.ref}, {t} {self.vec(a)}, {t} {self.vec(b)}")
        self.bind(op.result, self.vector(ref, a.ty))

    def emit_cast(self, op: Operation) -> None:
        x = self.get(op.input)
        source, target = op.input.type, op.result.type
        width = self.lanes_of((x,))
        ref = self.vec(x) if width > 1 else x.ref
        out = self.cast(source, target, ref, width)
        facts = dict(multiple=x.multiple, nonneg=x.nonneg) if source.is_integer and target is index and width == 1 else {}
        self.bind(op.result, Val(out, REGISTER[target.name], VECTOR if width > 1 else UNIFORM, **facts))

    def cast(self, source: ScalarType, target: ScalarType, ref: str, width: int) -> str:
        """arith.cast as the interpreter defines it: floats and integers reach a
        float target through f32; float -> int truncates (nan/inf give 0)."""
        fb = self.fb
        s, d = REGISTER[source.name], REGISTER[target.name]
        st, dt = vty(s, width), vty(d, width)
        if source is target or (source.is_integer and target.is_integer and s == d and target is not i1 and source is not i1):
            return ref
        if target.is_float:
            if source.is_float:
                as_f32 = ref if s == "float" else fb.emit(f"{'fptrunc' if s == 'double' else 'fpext'} {st} {ref} to {vty('float', width)}")
            else:
                as_f32 = fb.emit(f"{'uitofp' if source is i1 else 'sitofp'} {st} {ref} to {vty('float', width)}")
            ft = vty("float", width)
            if target is bf16:
                return self.round_bf16(as_f32, width)
            if d == "float":
                return as_f32
            return fb.emit(f"{'fpext' if d == 'double' else 'fptrunc'} {ft} {as_f32} to {dt}")
        if target is i1:
            if source.is_float:
                return fb.emit(f"fcmp une {st} {ref}, {self.lit(s, float_literal(0.0, s), width)}")
            return fb.emit(f"icmp ne {st} {ref}, {self.lit(s, '0', width)}")
        if source.is_float:
            value = fb.call(f"llvm.fptosi.sat.{mangle(d, width)}.{mangle(s, width)}", dt, [(st, ref)])
            magnitude = fb.call(f"llvm.fabs.{mangle(s, width)}", st, [(st, ref)])
            infinite = fb.emit(f"fcmp oeq {st} {magnitude}, {self.lit(s, float_literal(float('inf'), s), width)}")
            return fb.emit(f"select {vty('i1', width)} {infinite}, {dt} {self.lit(d, '0', width)}, {dt} {value}")
        if source is i1:
            return fb.emit(f"zext {st} {ref} to {dt}")
        if BITS[s] < BITS[d]:
            return fb.emit(f"sext {st} {ref} to {dt}")
        return fb.emit(f"trunc {st} {ref} to {dt}")

    def emit_math(self, op: Operation) -> None:
        args = [self.get(v) for v in op.operands]
        t = op.result.type
        width = self.lanes_of(args)
        refs = [self.vec(a) if width > 1 else a.ref for a in args]
        reg = REGISTER[t.name]
        ty = vty(reg, width)
        fb = self.fb
        name = op.name
        if name in ("math.sqrt", "math.abs"):
            out = fb.call(f"llvm.{'sqrt' if name == 'math.sqrt' else 'fabs'}.{mangle(reg, width)}", ty, [(ty, refs[0])])
        elif name == "math.rsqrt":
            root = fb.call(f"llvm.sqrt.{mangle(reg, width)}", ty, [(ty, refs[0])])
            out = fb.emit(f"fdiv {ty} {self.lit(reg, float_literal(1.0, reg), width)}, {root}")
        elif t is f64:
            out = self.scalarised_libm(name.split(".")[1], ty, refs[0], width)
        else:
            x = refs[0] if reg == "float" else fb.emit(f"fpext {ty} {refs[0]} to {vty('float', width)}")
            out = llvm_math.EXPANSIONS[name](llvm_math.F32Ops(fb, width, self.isa), x)
            if t is f16:
                out = fb.emit(f"fptrunc {vty('float', width)} {out} to {ty}")
        if t is bf16 and name != "math.abs":
            out = self.round_bf16(out, width)
        self.bind(op.result, Val(out, reg, VECTOR if width > 1 else UNIFORM))

    def scalarised_libm(self, function: str, ty: str, ref: str, width: int) -> str:
        fb = self.fb
        if width == 1:
            return fb.call(function, "double", [("double", ref)])
        out = "poison"
        for lane in range(width):
            x = fb.emit(f"extractelement {ty} {ref}, i64 {lane}")
            y = fb.call(function, "double", [("double", x)])
            out = fb.emit(f"insertelement {ty} {out}, double {y}, i64 {lane}")
        return out


FLOAT_OPCODES = {"arith.add": "fadd", "arith.sub": "fsub", "arith.mul": "fmul", "arith.div": "fdiv"}
FLOAT_INTRINSICS = {"arith.max": "maxnum", "arith.min": "minnum", "math.pow": "pow"}
INT_OPCODES = {"arith.add": "add", "arith.sub": "sub", "arith.mul": "mul", "arith.and": "and", "arith.or": "or", "arith.xor": "xor"}
FLOAT_PREDICATES = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
SIGNED_PREDICATES = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
UNSIGNED_PREDICATES = {"eq": "eq", "ne": "ne", "lt": "ult", "le": "ule", "gt": "ugt", "ge": "uge"}

HANDLERS = {
    "arith.constant": KernelEmitter.emit_constant,
    "arith.neg": KernelEmitter.emit_neg,
    "arith.cmp": KernelEmitter.emit_cmp,
    "arith.select": KernelEmitter.emit_select,
    "arith.cast": KernelEmitter.emit_cast,
    "loop.for": KernelEmitter.emit_for,
    "loop.parallel": KernelEmitter.emit_parallel,
    "loop.if": KernelEmitter.emit_if,
    "loop.load": KernelEmitter.emit_load,
    "loop.store": KernelEmitter.emit_store,
    "loop.alloc": KernelEmitter.emit_alloc,
    "loop.constant": KernelEmitter.emit_constant_buffer,
    "loop.view": KernelEmitter.emit_view,
}
for _name in ("arith.add", "arith.sub", "arith.mul", "arith.div", "arith.rem", "arith.max", "arith.min", "arith.and", "arith.or", "arith.xor", "math.pow"):
    HANDLERS[_name] = KernelEmitter.emit_binary
for _name in ("math.exp", "math.log", "math.sqrt", "math.rsqrt", "math.tanh", "math.erf", "math.abs"):
    HANDLERS[_name] = KernelEmitter.emit_math
