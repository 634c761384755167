"""CUDA C from GPU-mapped loop IR: one translation unit per program.

Each `loop.kernel` becomes an `extern "C" __global__` function:

  * the block-mapped `loop.parallel` at its top gives the grid and binds its
    induction variables to `blockIdx`; the code around and inside it is
    block-level code, which every thread of the block runs (it is uniform);
  * each thread-mapped `loop.parallel` (the block's extents) binds its
    variables to `threadIdx` and becomes a scoped section that every thread
    runs; where one section (or block-level memory access) may read or write
    what an earlier one touched, a `__syncthreads()` goes between them,
    because the loop interpreter finishes one thread loop before it starts
    the next. Block-level stores run once per block, on thread 0;
  * `loop.barrier` is `__syncthreads()`, `loop.shuffle_xor` is
    `__shfl_xor_sync(0xffffffff, v, offset)`;
  * `loop.alloc` makes `__shared__` arrays (or per-thread arrays for `local`,
    zeroed like the interpreter's), `loop.constant` file-scope
    `__device__ const` data;
  * multi-dimensional indices are flattened row-major; a guarded load is a
    conditional expression with the padding value, a guarded store an `if`.

Scalars are C locals named after the IR's SSA names where it has them.
f16/bf16 values live in `float` registers and are rounded to their precision
after each operation that produces one (so results match the interpreter);
in memory they are `__half`/`__nv_bfloat16`. Float literals are exact
(shortest round-trip spelling); infinities are the prelude's macros, NaNs
bit casts. The float modes (NVRTC flags) are in docs/cuda-target.md.

`emit_cuda(module)` returns a `CudaSource`: the text, each kernel's launch
geometry and parameters, and the line range of each kernel, so that an
NVRTC error can be traced back to the kernel it is in.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from fusecc.compiler.diagnostics import FileLineColLoc, FusedLoc, Location, NameLoc
from fusecc.compiler.ir import Block, Operation, Value
from fusecc.compiler.types import MemRefType, ScalarType, bf16, f16, f32, f64, i1, i8, i32, i64, index
from fusecc.dialects import loop
from fusecc.passes.backends.cuda.source import prelude_text

STATIC_SHARED_LIMIT = 48 * 1024  # bytes of static __shared__ per block; beyond it, dynamic shared memory
MAX_THREADS_PER_BLOCK = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)
INT32_MAX = 2**31 - 1


class EmitError(Exception):
    """The loop IR uses something the CUDA emitter cannot express (an
    internal error: the lowering should not produce it)."""


# --------------------------------------------------------------------------- results


@dataclass
class KernelParam:
    name: str
    c_type: str  # as declared, e.g. "const float* __restrict__"
    type: str  # the IR type, e.g. "memref<4x100xf32>"
    written: bool = False


@dataclass
class KernelInfo:
    """What a launcher needs to know about one emitted kernel."""

    name: str  # in C; the loop IR's symbol is `sym_name`
    sym_name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    static_shared_bytes: int
    dynamic_shared_bytes: int
    params: list[KernelParam]
    lines: tuple[int, int]  # first and last line of the kernel (and its constants) in the source
    group: int | None = None
    kind: str | None = None
    baked_args: tuple[int, ...] = ()  # arguments the kernel reads as constant data instead: the launch leaves them out
    estimate: tuple[int, int] | None = None  # (registers per thread, shared bytes) fusion and tiling assumed (`tile.*`)


@dataclass
class CudaSource:
    text: str
    kernels: list[KernelInfo] = field(default_factory=list)
    fills: dict = field(default_factory=dict)  # loop.copy of a schedule constant -> its fill kernel's name

    def kernel(self, name: str) -> KernelInfo:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    def kernel_at_line(self, line: int) -> KernelInfo | None:
        for k in self.kernels:
            if k.lines[0] <= line <= k.lines[1]:
                return k
        return None


# --------------------------------------------------------------------------- types and literals

C_STORAGE = {f16: "__half", bf16: "__nv_bfloat16", f32: "float", f64: "double", i1: "bool", i8: "signed char", i32: "int", i64: "long long"}
LOAD_CONVERSION = {f16: "__half2float", bf16: "__bfloat162float"}
STORE_CONVERSION = {f16: "__float2half_rn", bf16: "__float2bfloat16_rn"}
ROUND_TO = {f16: "fusecc_round_f16", bf16: "fusecc_round_bf16"}


def is_reduced_float(t) -> bool:
    return t is f16 or t is bf16


def float_literal(value: float, t: ScalarType) -> str:
    """An exact C spelling of `value` as a `t` (f16/bf16 values are exact in f32)."""
    if t is f64:
        if math.isinf(value) or math.isnan(value):
            bits = np.array(value, dtype=np.float64).view(np.uint64).item()
            return f"__longlong_as_double((long long)0x{bits:016x}ull)"
        text = repr(float(value))
        text = text if any(c in text for c in ".e") else text + ".0"
        return f"({text})" if text.startswith("-") else text
    single = np.float32(value)
    if np.isinf(single):
        return "FUSECC_POS_INF" if single > 0 else "FUSECC_NEG_INF"  # from the prelude
    if np.isnan(single):
        return f"__int_as_float(0x{single.view(np.uint32).item():08x})"
    text = np.format_float_positional(single, unique=True, trim="0") if 1e-4 <= abs(single) < 1e8 or single == 0 else np.format_float_scientific(single, unique=True, trim="0")
    if text.startswith("-0") and single == 0:
        text = "-0.0"
    if "." not in text and "e" not in text:
        text += ".0"
    return f"({text}f)" if text.startswith("-") else text + "f"


def int_literal(value: int, c_type: str) -> str:
    value = int(value)
    if c_type == "bool":
        return "true" if value else "false"
    wide = c_type == "long long"
    if value == -(2**63) and wide:
        return "(-9223372036854775807LL - 1)"
    if value == -(2**31) and not wide:
        return "(-2147483647 - 1)"
    text = str(value) + ("LL" if wide and not -(2**31) <= value <= INT32_MAX else "")
    return f"({text})" if value < 0 else text


# --------------------------------------------------------------------------- names

C_RESERVED = frozenset(
    """alignas alignof and asm auto bool break case catch char class const constexpr continue default delete do double
    else enum explicit export extern false float for friend goto if inline int long mutable namespace new noexcept not
    nullptr operator or private protected public register restrict return short signed sizeof static struct switch
    template this throw true try typedef typeid typename union unsigned using virtual void volatile while xor
    threadIdx blockIdx blockDim gridDim warpSize half nv_bfloat16 min max abs exp log sqrt tanh erf pow main
    expf logf sqrtf rsqrtf rsqrt tanhf erff fabsf fabs powf fmaxf fminf fmax fmin""".split()
)


def c_identifier(hint: str | None) -> str | None:
    if not hint or hint.isdigit():
        return None
    name = re.sub(r"[^A-Za-z0-9_]", "_", hint)
    name = name.lstrip("_") or None
    if name is None:
        return None
    if name[0].isdigit():
        name = "v" + name
    if name in C_RESERVED or name.startswith("fusecc"):
        name += "_"
    return name


class ScopedNames:
    """C names for SSA values: unique among the names visible where they are
    declared, so sibling scopes may reuse short names like `v`."""

    def __init__(self, taken_globally: set[str]):
        self.scopes: list[set[str]] = [taken_globally, set()]  # file scope (shared, by reference), then the kernel's
        self.counters: dict[str, int] = {}

    def push(self) -> None:
        self.scopes.append(set())

    def pop(self) -> None:
        self.scopes.pop()

    def visible(self, name: str) -> bool:
        return any(name in scope for scope in self.scopes)

    def claim(self, base: str) -> str:
        name, suffix = base, 1
        while self.visible(name):
            name = f"{base}_{suffix}"
            suffix += 1
        self.scopes[-1].add(name)
        return name

    def fresh(self, prefix: str) -> str:
        while True:
            n = self.counters.get(prefix, 0)
            self.counters[prefix] = n + 1
            name = f"{prefix}{n}"
            if not self.visible(name):
                self.scopes[-1].add(name)
                return name


def anonymous_prefix(t) -> str:
    if isinstance(t, MemRefType):
        return "buf"
    if t is i1:
        return "p"
    if t.is_float:
        return "v"
    return "i"


# --------------------------------------------------------------------------- locations


def format_location(loc: Location) -> list[str]:
    """`file:line:col` of every concrete position in `loc`."""
    if isinstance(loc, FileLineColLoc):
        return [f"{loc.file}:{loc.line}:{loc.col}"]
    if isinstance(loc, FusedLoc):
        return [text for part in loc.locations for text in format_location(part)]
    if isinstance(loc, NameLoc):
        inner = format_location(loc.child) if loc.child else []
        return [f"{loc.name} ({', '.join(inner)})" if inner else loc.name]
    return []


# --------------------------------------------------------------------------- memory effects (for barrier placement)


def base_buffer(value: Value) -> Value:
    while isinstance(value.defining_op, loop.ViewOp):
        value = value.defining_op.source
    return value


@dataclass
class Effects:
    reads: set = field(default_factory=set)
    writes: set = field(default_factory=set)

    def __or__(self, other: "Effects") -> "Effects":
        return Effects(self.reads | other.reads, self.writes | other.writes)

    def conflicts(self, other: "Effects") -> set:
        """The buffers one side writes and the other touches."""
        return self.writes & (other.reads | other.writes) | self.reads & other.writes


# --------------------------------------------------------------------------- constant data


def unique_global(base: str, taken: set[str]) -> str:
    name, suffix = base, 1
    while name in taken:
        name, suffix = f"{base}_{suffix}", suffix + 1
    taken.add(name)
    return name


def constant_array(name: str, op: loop.ConstantOp, comment: str) -> tuple[list[str], str]:
    """`static __device__ const T name[n] = {...};` holding `op`'s value, and
    the C expression that reads it. f16/bf16 data is kept as exact f32
    values: loads need no conversion. Data with infinities or NaNs is kept
    as bit patterns (NVRTC has no constant expression for them) and read
    through a pointer cast."""
    t = op.result.type
    element = t.element_type
    c_type = "float" if is_reduced_float(element) else "long long" if element is index else C_STORAGE[element]
    values = np.asarray(op.attr("value").array).reshape(-1)
    expr = name
    if element.is_float and not np.all(np.isfinite(values)):
        wide = element is f64
        bits = values.astype(np.float64 if wide else np.float32).view(np.uint64 if wide else np.uint32)
        items = [f"0x{int(b):0{16 if wide else 8}x}{'ull' if wide else 'u'}" for b in bits]
        expr = f"reinterpret_cast<const {c_type}*>({name})"
        c_type = "unsigned long long" if wide else "unsigned int"
    elif element.is_float:
        items = [float_literal(float(v), f64 if element is f64 else f32) for v in values]
    else:
        items = [int_literal(int(v), c_type) for v in values]
    lines = [f"// {t}, {comment}", f"static __device__ const {c_type} {name}[{max(len(items), 1)}] = {{"]
    for start in range(0, len(items), 8):
        lines.append("    " + ", ".join(items[start : start + 8]) + ",")
    return lines + (["    0,"] if not items else []) + ["};"], expr


# --------------------------------------------------------------------------- the emitter


class KernelEmitter:
    """Writes one kernel's C function (and its constant data) into `lines`."""

    def __init__(self, kernel: loop.KernelOp, name: str, restrict_params: set[int], globals_taken: set[str], param_hints=(), baked=None):
        self.kernel = kernel
        self.param_hints = list(param_hints)
        self.baked = dict(baked or {})  # argument index -> C name of the schedule constant every launch passes there
        self.baked_args = {kernel.body.args[i] for i in self.baked}
        self.name = name
        self.restrict_params = restrict_params
        self.lines: list[str] = []
        self.data_lines: list[str] = []  # file-scope constant arrays
        self.names = ScopedNames(globals_taken)
        self.globals_taken = globals_taken
        self.c: dict[Value, str] = {}  # value -> C expression
        self.depth = 1
        self.index_type = self._choose_index_type()
        self.grid, self.block = self._gpu_structure()
        self.shared_layout, self.static_shared, self.dynamic_shared = self._plan_shared()
        self.barrier_before: dict[Operation, set] = {}  # op -> the buffers the barrier orders
        self.barrier_at_end: dict[Block, set] = {}
        self.uses_reduced_float: set[ScalarType] = set()
        self.written = self._written_buffers()
        self._cross_thread_aliases = {a for i, a in enumerate(kernel.body.args) if isinstance(a.type, MemRefType) and i not in restrict_params}

    # --- analysis ------------------------------------------------------------------
    def _choose_index_type(self) -> str:
        """`int` when every buffer and extent fits in 31 bits (cheaper on the GPU), else `long long`."""
        for op in self.kernel.walk():
            for v in list(op.results) + [a for r in op.regions for b in r.blocks for a in b.args]:
                if isinstance(v.type, MemRefType) and v.type.num_elements > INT32_MAX:
                    return "long long"
            if isinstance(op, loop.ParallelOp) and any(u > INT32_MAX for u in op.upper):
                return "long long"
            if op.name == "arith.constant" and op.result.type is index and not -(2**31) < op.attr("value").value <= INT32_MAX:
                return "long long"
            if op.name == "arith.cast" and op.result.type is index and op.input.type is i64:
                return "long long"
        for a in self.kernel.body.args:
            if isinstance(a.type, MemRefType) and a.type.num_elements > INT32_MAX:
                return "long long"
        return "int"

    def _gpu_structure(self) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid, block), after checking the kernel is mapped for a GPU within its limits."""
        loops = self.kernel.parallel_loops()
        blocks = [p for p in loops if p.maps_blocks]
        for p in loops:
            bad = [m for m in p.mapping if m in loop.CPU_MAPPINGS]
            if bad:
                raise EmitError(f"kernel @{self.kernel.sym_name} is mapped for the CPU ({bad[0]}), not the GPU")
        if len(blocks) > 1:
            raise EmitError(f"kernel @{self.kernel.sym_name} has {len(blocks)} block-mapped loops; a GPU kernel has one")
        grid, block = self.kernel.launch_dims()
        for axis, (g, limit) in enumerate(zip(grid, MAX_GRID)):
            if g > limit:
                raise EmitError(f"kernel @{self.kernel.sym_name}: grid dimension {'xyz'[axis]} = {g} exceeds {limit}")
        threads = block[0] * block[1] * block[2]
        if threads > MAX_THREADS_PER_BLOCK:
            raise EmitError(f"kernel @{self.kernel.sym_name}: {threads} threads per block exceed {MAX_THREADS_PER_BLOCK}")
        return grid, block

    def _plan_shared(self):
        allocs = [op for op in self.kernel.walk() if isinstance(op, loop.AllocOp) and op.result.type.memory_space == "shared"]
        total = sum(op.result.type.byte_size for op in allocs)
        if total <= STATIC_SHARED_LIMIT:
            return {}, total, 0
        layout, offset = {}, 0
        for op in allocs:
            offset = (offset + 15) // 16 * 16
            layout[op] = offset
            offset += op.result.type.byte_size
        return layout, 0, offset

    def _written_buffers(self) -> set[Value]:
        return {base_buffer(op.buffer) for op in self.kernel.walk() if isinstance(op, loop.StoreOp)}

    def is_constant(self, buffer: Value) -> bool:
        """Whether `buffer` is constant data (kept as f32 for f16/bf16)."""
        base = base_buffer(buffer)
        return isinstance(base.defining_op, loop.ConstantOp) or base in self.baked_args

    def _memory_key(self, buffer: Value):
        """What two accesses must share to touch the same memory across threads."""
        base = base_buffer(buffer)
        if base in self._cross_thread_aliases:
            return "aliased arguments"
        return base

    def effects(self, op: Operation) -> Effects:
        """Cross-thread memory effects of `op` and everything nested in it."""
        out = Effects()
        for inner in op.walk():
            if isinstance(inner, (loop.LoadOp, loop.StoreOp)):
                t = inner.buffer.type
                base = base_buffer(inner.buffer)
                if t.memory_space == "local" or self.is_constant(base):
                    continue
                (out.writes if isinstance(inner, loop.StoreOp) else out.reads).add(self._memory_key(inner.buffer))
        return out

    def plan_barriers(self, block: Block, pending: Effects) -> Effects:
        """Mark where block-level code needs a `__syncthreads()`; returns the
        effects not yet separated from what follows by a barrier."""
        for op in block:
            if isinstance(op, loop.BarrierOp):
                pending = Effects()
            elif isinstance(op, loop.ParallelOp) and op.maps_blocks:
                pending = self.plan_barriers(op.body, pending)
            elif isinstance(op, (loop.ForOp, loop.IfOp)):  # block-level control flow: uniform
                # One barrier before the whole construct, rather than one per iteration, where it can.
                ordered = pending.conflicts(self.effects(op))
                if ordered:
                    self.barrier_before[op] = ordered
                    pending = Effects()
                if isinstance(op, loop.IfOp):
                    pending = self.plan_barriers(op.then_block, pending) | self.plan_barriers(op.else_block, pending)
                    continue
                at_end = self.plan_barriers(op.body, pending)
                wrap = at_end.conflicts(self._effects_until_barrier(op.body))
                if wrap:  # the next iteration's start races with this one's end
                    self.barrier_at_end[op.body] = wrap
                    at_end = Effects()
                pending = pending | at_end  # the loop may also run no iteration
            else:
                pending = self._barrier_before(op, pending, self.effects(op))
        return pending

    def _barrier_before(self, op: Operation, pending: Effects, mine: Effects) -> Effects:
        ordered = pending.conflicts(mine)
        if ordered:
            self.barrier_before[op] = ordered
            pending = Effects()
        return pending | mine

    def _effects_until_barrier(self, block: Block) -> Effects:
        out = Effects()
        for op in block:
            if isinstance(op, loop.BarrierOp) or op in self.barrier_before:
                break
            out = out | self.effects(op)
        return out

    # --- output helpers ------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def open(self, head: str) -> None:
        """Start a C block; the caller has pushed the scope its head declares names in."""
        self.line(head)
        self.depth += 1

    def close(self) -> None:
        self.names.pop()
        self.depth -= 1
        self.line("}")

    def name_for(self, value: Value, preferred: str | None = None) -> str:
        """A fresh C name for `value` in the current scope (nothing is emitted)."""
        hint = c_identifier(value.name_hint) or c_identifier(preferred)
        name = self.names.claim(hint) if hint else self.names.fresh(anonymous_prefix(value.type))
        self.c[value] = name
        return name

    def define(self, value: Value, expr: str, c_type: str | None = None) -> str:
        name = self.name_for(value)
        self.line(f"const {c_type or self.value_type(value.type)} {name} = {expr};")
        return name

    def value_type(self, t) -> str:
        if t is index:
            return self.index_type
        if is_reduced_float(t):
            self.uses_reduced_float.add(t)
            return "float"
        return C_STORAGE[t]

    def storage_type(self, t: ScalarType) -> str:
        if is_reduced_float(t):
            self.uses_reduced_float.add(t)
        return "long long" if t is index else C_STORAGE[t]  # index buffers hold i64, as in the interpreter

    def e(self, value: Value) -> str:
        try:
            return self.c[value]
        except KeyError:
            raise EmitError(f"kernel @{self.kernel.sym_name}: a value of type {value.type} is used before the emitter defined it") from None

    def rounded(self, expr: str, t: ScalarType) -> str:
        """`expr` (computed in f32) rounded to `t`'s precision when `t` is f16/bf16."""
        if is_reduced_float(t):
            self.uses_reduced_float.add(t)
            return f"{ROUND_TO[t]}({expr})"
        return expr

    # --- the kernel ------------------------------------------------------------------
    def emit(self) -> list[str]:
        kernel = self.kernel
        params = self.signature()
        self.plan_barriers(kernel.body, Effects())
        body_start = len(self.lines)
        for op in kernel.body:
            self.emit_op(op)
        body = self.lines[body_start:]
        self.lines = self.lines[:body_start]
        self.params = params
        header = self.comment_lines()
        bounds = max(1, self.block[0] * self.block[1] * self.block[2])  # an empty block is never launched
        param_text = ", ".join(f"{p.c_type} {p.name}" for p in params)
        out = header + [f'extern "C" __global__ void __launch_bounds__({bounds}) {self.name}({param_text}) {{']
        out += self.prologue + body + ["}"]
        return out

    def comment_lines(self) -> list[str]:
        k = self.kernel
        group, kind = k.attr("group"), k.attr("kind")
        what = []
        if group is not None:
            what.append(f"fusion group {group}")
        if kind:
            what.append(f"({kind})" if what else kind)
        out = [f"// {self.name}: {' '.join(what) or 'kernel'}" + ("" if self.name == k.sym_name else f" (@{k.sym_name} in the loop IR)")]
        where = format_location(k.location)
        if where:
            out.append("// source: " + ", ".join(where))
        if k.attr("source"):
            out.append("// ops: " + k.attr("source"))
        shared = []
        if self.static_shared:
            shared.append(f"{self.static_shared} bytes of static shared memory")
        if self.dynamic_shared:
            shared.append(f"{self.dynamic_shared} bytes of dynamic shared memory")
        launch = f"// launch: grid ({', '.join(map(str, self.grid))}), block ({', '.join(map(str, self.block))})"
        out.append(launch + (", " + ", ".join(shared) if shared else ""))
        return out

    def signature(self) -> list[KernelParam]:
        params: list[KernelParam] = []
        self.prologue: list[str] = []
        for i, arg in enumerate(self.kernel.body.args):
            t = arg.type
            if i in self.baked:
                if arg in self.written:
                    raise EmitError(f"kernel @{self.kernel.sym_name} writes to argument {i}, a constant of the schedule")
                self.c[arg] = self.baked[i]
                continue
            role = "out" if arg in self.written else "in" if isinstance(t, MemRefType) else "arg"
            hint = self.param_hints[i] if i < len(self.param_hints) else None
            name = self.name_for(arg, c_identifier(hint) or f"{role}{i}")
            if isinstance(t, MemRefType):
                written = arg in self.written
                restrict = " __restrict__" if i in self.restrict_params else ""
                c_type = f"{'' if written else 'const '}{self.storage_type(t.element_type)}*{restrict}"
                params.append(KernelParam(name, c_type, str(t), written))
            elif is_reduced_float(t):
                # Scalars travel in their storage type; the kernel computes in f32.
                raw = self.names.claim(name + "_bits")
                params.append(KernelParam(raw, self.storage_type(t), str(t)))
                self.prologue.append(f"  const float {name} = {LOAD_CONVERSION[t]}({raw});")
            else:
                params.append(KernelParam(name, self.value_type(t), str(t)))
        return params

    # --- ops -----------------------------------------------------------------------
    def emit_block(self, block: Block) -> list[Value]:
        """Emit the ops of `block`; returns the values its terminator yields."""
        for op in block:
            if isinstance(op, (loop.YieldOp, loop.ReturnOp)):
                if block in self.barrier_at_end:
                    keys = self.barrier_at_end[block]
                    self.line(f"__syncthreads();  // {self.buffer_names(keys)} {'is' if len(keys) == 1 else 'are'} used again in the next iteration")
                return list(op.operands)
            self.emit_op(op)
        return []

    def emit_op(self, op: Operation) -> None:
        if op in self.barrier_before:
            self.line(f"__syncthreads();  // {self.buffer_names(self.barrier_before[op])}: written by some threads, used by others")
        handler = getattr(self, "emit_" + op.name.replace(".", "_"), None)
        if handler is None:
            raise EmitError(f"the CUDA emitter does not handle '{op.name}' (kernel @{self.kernel.sym_name})")
        handler(op)

    def buffer_names(self, keys) -> str:
        return ", ".join(sorted(self.c.get(k, k) if not isinstance(k, str) else k for k in keys))

    def emit_loop_return(self, op):
        pass

    def emit_loop_parallel(self, op: loop.ParallelOp) -> None:
        if op.maps_blocks:
            for arg, mapping in zip(op.induction_vars, op.mapping):
                self.define(arg, f"blockIdx.{mapping[-1]}")
            self.emit_block(op.body)
            return
        if op.maps_threads:
            self.names.push()
            self.open(f"{{  // every thread of the block ({' x '.join(map(str, op.upper))})")
            for arg, mapping in zip(op.induction_vars, op.mapping):
                self.define(arg, f"threadIdx.{mapping[-1]}")
            self.emit_block(op.body)
            self.close()
            return
        for arg, upper in zip(op.induction_vars, op.upper):  # a sequential nest
            self.names.push()
            i = self.name_for(arg, "i")
            self.open(f"for ({self.index_type} {i} = 0; {i} < {upper}; ++{i}) {{")
        self.emit_block(op.body)
        for _ in op.upper:
            self.close()

    def emit_loop_for(self, op: loop.ForOp) -> None:
        # Loop-carried values are mutable locals, named after the loop's
        # result (else its block argument); the body reads them in place.
        carried = []
        for result, arg, init in zip(op.results, op.iter_args, op.operands[3:]):
            name = self.name_for(result, arg.name_hint)
            self.line(f"{self.value_type(arg.type)} {name} = {self.e(init)};")
            self.c[arg] = name
            carried.append(name)
        if op.attr("unroll"):
            self.line(f"#pragma unroll {op.attr('unroll')}")
        lower, upper, step = (self.e(v) for v in op.operands[:3])
        self.names.push()
        iv = self.name_for(op.induction_var, "k")
        increment = f"++{iv}" if step == "1" else f"{iv} += {step}"
        self.open(f"for ({self.index_type} {iv} = {lower}; {iv} < {upper}; {increment}) {{")
        yielded = self.emit_block(op.body)
        self.assign(carried, yielded, set(op.iter_args))
        self.close()

    def assign(self, targets: list[str], values: list[Value], carried: set[Value]) -> None:
        """`target = value` for each pair; through temporaries when a value is
        itself a carried variable another assignment overwrites (a swap)."""
        pairs = [(t, self.e(v)) for t, v in zip(targets, values) if self.e(v) != t]
        if len(pairs) > 1 and any(v in carried for v in values):
            staged = []
            for t, expr in pairs:
                temp = self.names.fresh("next")
                self.line(f"const auto {temp} = {expr};")
                staged.append((t, temp))
            pairs = staged
        for t, expr in pairs:
            self.line(f"{t} = {expr};")

    def emit_loop_if(self, op: loop.IfOp) -> None:
        targets = []
        for r in op.results:
            name = self.name_for(r)
            self.line(f"{self.value_type(r.type)} {name};")
            targets.append(name)
        self.names.push()
        self.open(f"if ({self.e(op.condition)}) {{")
        self.assign(targets, self.emit_block(op.then_block), set())
        if op.results or any(not isinstance(o, loop.YieldOp) for o in op.else_block):
            self.names.pop()
            self.names.push()
            self.depth -= 1
            self.line("} else {")
            self.depth += 1
            self.assign(targets, self.emit_block(op.else_block), set())
        self.close()

    def emit_loop_barrier(self, op) -> None:
        self.line("__syncthreads();")

    def emit_loop_shuffle_xor(self, op) -> None:
        threads = self.block[0] * self.block[1] * self.block[2]
        if threads % 32:
            raise EmitError(f"kernel @{self.kernel.sym_name}: a warp shuffle in a block of {threads} threads (not a whole number of warps)")
        t = op.value.type
        if t is i1:
            self.define(op.result, f"__shfl_xor_sync(0xffffffffu, (int){self.e(op.value)}, {op.offset}) != 0")
        else:
            self.define(op.result, f"__shfl_xor_sync(0xffffffffu, {self.e(op.value)}, {op.offset})")

    def emit_loop_alloc(self, op: loop.AllocOp) -> None:
        t = op.result.type
        c_type = self.storage_type(t.element_type)
        count = max(t.num_elements, 1)
        name = self.name_for(op.result, "tile" if t.memory_space == "shared" else "acc")
        dims = f"  // {'x'.join(map(str, t.shape))}" if t.rank > 1 else ""
        if t.memory_space == "local":
            self.line(f"{c_type} {name}[{count}] = {{}};  // per thread" + (f", {dims[5:]}" if dims else ""))
        elif op in self.shared_layout:
            self.line(f"{c_type}* {name} = reinterpret_cast<{c_type}*>(fusecc_dynamic_shared + {self.shared_layout[op]});{dims}")
        else:
            self.line(f"__shared__ {c_type} {name}[{count}];{dims}")

    def emit_loop_constant(self, op: loop.ConstantOp) -> None:
        name = unique_global(f"{self.name}_{c_identifier(op.result.name_hint) or 'data'}", self.globals_taken)
        lines, self.c[op.result] = constant_array(name, op, f"read by {self.name}")
        self.data_lines += lines

    def emit_loop_view(self, op: loop.ViewOp) -> None:
        source, t = op.source.type, op.result.type
        c_type = self.storage_type(t.element_type)
        base = base_buffer(op.source)
        const = "" if base in self.written and not self.is_constant(base) else "const "
        if source.element_type is t.element_type and op.offset % t.element_type.byte_size == 0:
            step = op.offset // t.element_type.byte_size
            expr = self.e(op.source) + (f" + {step}" if step else "")
        else:
            expr = f"reinterpret_cast<{const}{c_type}*>(reinterpret_cast<{const}char*>({self.e(op.source)}) + {op.offset})"
        name = self.name_for(op.result, "view")
        self.line(f"{const}{c_type}* {name} = {expr};  // {t}")

    def flat_index(self, buffer: Value, indices) -> str:
        shape = buffer.type.shape
        terms = []
        stride = 1
        for size, idx in reversed(list(zip(shape, indices))):
            expr = self.e(idx)
            if expr != "0":
                terms.append(expr if stride == 1 else f"{expr} * {stride}")
            stride *= size
        return " + ".join(reversed(terms)) or "0"

    def element(self, buffer: Value, indices) -> str:
        return f"{self.e(buffer)}[{self.flat_index(buffer, indices)}]"

    def emit_loop_load(self, op: loop.LoadOp) -> None:
        t = op.buffer.type.element_type
        access = self.element(op.buffer, op.indices)
        from_constant = self.is_constant(op.buffer)
        if is_reduced_float(t) and not from_constant:
            access = f"{LOAD_CONVERSION[t]}({access})"
        if op.guard is not None:
            padding = op.attr("padding")
            pad_value = 0 if padding is None else padding.value
            access = f"{self.e(op.guard)} ? {access} : {self.literal(pad_value, t)}"
        self.define(op.result, access)

    def emit_loop_store(self, op: loop.StoreOp) -> None:
        t = op.buffer.type.element_type
        value = self.e(op.value)
        if is_reduced_float(t):
            value = f"{STORE_CONVERSION[t]}({value})"
        statement = f"{self.element(op.buffer, op.indices)} = {value};"
        conditions = []
        if not self._in_thread_code(op):
            if self.block[0] * self.block[1] * self.block[2] > 1:
                conditions.append("threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0")
        if op.guard is not None:
            conditions.append(self.e(op.guard))
        if conditions:
            statement = f"if ({' && '.join(conditions)}) {statement}"
            if len(conditions) > 1 or op.guard is None:
                statement += "  // block-level store: once per block"
        self.line(statement)

    def _in_thread_code(self, op: Operation) -> bool:
        p = op.parent_of_type(loop.ParallelOp)
        while p is not None:
            if p.maps_threads:
                return True
            p = p.parent_of_type(loop.ParallelOp)
        return False

    def literal(self, value, t: ScalarType) -> str:
        if t.is_float:
            if isinstance(value, bool):
                value = float(value)
            return float_literal(float(value), f32 if is_reduced_float(t) else t)
        if t is i1:
            return "true" if value else "false"
        return int_literal(int(value), self.value_type(t))

    def emit_arith_constant(self, op) -> None:
        self.c[op.result] = self.literal(op.attr("value").value, op.result.type)

    BINARY_C = {"arith.add": "+", "arith.sub": "-", "arith.mul": "*", "arith.div": "/", "arith.rem": "%", "arith.and": "&", "arith.or": "|", "arith.xor": "^"}
    FLOAT_CALLS = {"arith.max": "fmax", "arith.min": "fmin", "math.pow": "pow", "math.exp": "exp", "math.log": "log",
                   "math.sqrt": "sqrt", "math.rsqrt": "rsqrt", "math.tanh": "tanh", "math.erf": "erf", "math.abs": "fabs"}
    EXACT_ON_REDUCED = ("arith.max", "arith.min", "math.abs")  # results already at f16/bf16 precision
    BOOL_C = {"arith.and": "&&", "arith.or": "||", "arith.xor": "!="}
    COMPARE_C = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}

    def emit_binary(self, op) -> None:
        t = op.result.type
        a, b = (self.e(v) for v in op.operands)
        if t.is_float and op.name in self.FLOAT_CALLS:
            expr = f"{self.FLOAT_CALLS[op.name]}{'' if t is f64 else 'f'}({a}, {b})"
            if op.name in self.EXACT_ON_REDUCED:
                self.define(op.result, expr)
                return
        elif op.name in ("arith.max", "arith.min"):
            expr = f"{a} {'>' if op.name == 'arith.max' else '<'} {b} ? {a} : {b}"
        elif t is i1:
            expr = f"{a} {self.BOOL_C.get(op.name, self.BINARY_C[op.name])} {b}"
            if op.name in ("arith.add", "arith.sub", "arith.mul", "arith.div", "arith.rem"):
                expr = f"({expr}) != 0"
        else:
            expr = f"{a} {self.BINARY_C[op.name]} {b}"
        self.define(op.result, self.rounded(expr, t) if t.is_float else expr)

    def emit_unary(self, op) -> None:
        t = op.result.type
        x = self.e(op.operands[0])
        if op.name == "arith.neg":
            self.define(op.result, f"-{x}")
            return
        expr = f"{self.FLOAT_CALLS[op.name]}{'' if t is f64 else 'f'}({x})"
        self.define(op.result, expr if op.name in self.EXACT_ON_REDUCED else self.rounded(expr, t))

    def emit_arith_cmp(self, op) -> None:
        self.define(op.result, f"{self.e(op.lhs)} {self.COMPARE_C[op.predicate]} {self.e(op.rhs)}")

    def emit_arith_select(self, op) -> None:
        self.define(op.result, f"{self.e(op.condition)} ? {self.e(op.true_value)} : {self.e(op.false_value)}")

    def emit_arith_cast(self, op) -> None:
        source, target = op.input.type, op.result.type
        x = self.e(op.input)
        if target is i1:
            expr = f"{x} != 0"
        elif source is target or (target is f32 and is_reduced_float(source)):
            expr = x  # f16/bf16 values are already exact f32 values
        elif is_reduced_float(target):
            expr = self.rounded(x if source.is_float and source is not f64 else f"(float){x}", target)
        else:
            expr = f"({self.value_type(target)}){x}"
        self.define(op.result, expr)


for _name in KernelEmitter.BINARY_C.keys() | {"arith.max", "arith.min", "math.pow"}:
    setattr(KernelEmitter, "emit_" + _name.replace(".", "_"), KernelEmitter.emit_binary)
for _name in ("arith.neg", "math.exp", "math.log", "math.sqrt", "math.rsqrt", "math.tanh", "math.erf", "math.abs"):
    setattr(KernelEmitter, "emit_" + _name.replace(".", "_"), KernelEmitter.emit_unary)


# --------------------------------------------------------------------------- the translation unit

PRELUDE_REDUCED_FLOAT = r"""#ifndef FUSECC_CPU_EMULATION
// f16/bf16 storage without cuda_fp16.h (NVRTC has no default include path):
// just the conversions this file uses, as PTX. (The CPU harness has its own.)
struct __align__(2) __half { unsigned short __x; };
struct __align__(2) __nv_bfloat16 { unsigned short __x; };
static __device__ __forceinline__ float __half2float(__half h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.__x)); return f; }
static __device__ __forceinline__ __half __float2half_rn(float f) { __half h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.__x) : "f"(f)); return h; }
static __device__ __forceinline__ float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((unsigned)h.__x << 16); }
static __device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rn(float f) { __nv_bfloat16 h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.__x) : "f"(f)); return h; }
#endif
// Values of f16/bf16 type are computed in f32 and rounded to their precision after each operation.
static __device__ __forceinline__ float fusecc_round_f16(float x) { return __half2float(__float2half_rn(x)); }
static __device__ __forceinline__ float fusecc_round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
"""



def kernel_c_name(kernel: loop.KernelOp) -> str:
    return c_identifier(kernel.sym_name) or "kernel"


def restrict_safe_params(module: Operation) -> dict[loop.KernelOp, set[int]]:
    """Parameters that may be `__restrict__`: no launch passes a buffer the
    kernel writes overlapping another of its arguments."""
    kernels = [op for op in module.walk() if isinstance(op, loop.KernelOp)]
    safe = {k: {i for i, a in enumerate(k.body.args) if isinstance(a.type, MemRefType)} for k in kernels}
    for schedule in (op for op in module.walk() if isinstance(op, loop.ScheduleOp)):
        places = buffer_places(schedule)
        for launch in schedule.launches():
            kernel = launch.resolve()
            if kernel is None:
                continue
            written = {base_buffer(op.buffer) for op in kernel.walk() if isinstance(op, loop.StoreOp)}
            ranges = [(i, places.get(v)) for i, v in enumerate(launch.operands) if isinstance(v.type, MemRefType)]
            for i, place in ranges:
                if kernel.body.args[i] not in written:
                    continue
                for j, other in ranges:
                    if j != i and place is not None and other is not None and place.overlaps(other):
                        safe[kernel].discard(i)
                        safe[kernel].discard(j)
    return safe


@dataclass(frozen=True)
class Place:
    """Where a schedule buffer lives: `arena`, `input` i or `output` i, at a byte offset."""

    buffer: str
    index: int
    offset: int
    size: int

    def overlaps(self, other: "Place") -> bool:
        return (self.buffer, self.index) == (other.buffer, other.index) and self.offset < other.offset + other.size and other.offset < self.offset + self.size


def buffer_places(schedule: loop.ScheduleOp) -> dict[Value, Place]:
    places: dict[Value, Place] = {}
    n_inputs = len(schedule.inputs)
    for i, arg in enumerate(schedule.body.args):
        kind, k = ("input", i) if i < n_inputs else ("output", i - n_inputs)
        places[arg] = Place(kind, k, 0, arg.type.byte_size)
    for op in schedule.body:
        if isinstance(op, loop.ArenaViewOp):
            places[op.result] = Place("arena", 0, op.offset, op.result.type.byte_size)
        elif isinstance(op, loop.ViewOp) and op.source in places:
            src = places[op.source]
            places[op.result] = Place(src.buffer, src.index, src.offset + op.offset, op.result.type.byte_size)
    return places


COPY_KERNEL_BLOCK = 256


def copy_kernel_name(element: ScalarType) -> str:
    return f"fusecc_copy_{'i64' if element is index else element.name}"


def copy_kernel(element: ScalarType) -> list[str]:
    """A kernel for the schedule's `loop.copy` between buffers of `element`s."""
    c_type = "long long" if element is index else C_STORAGE[element]
    name = copy_kernel_name(element)
    return [
        f"// {name}: a loop.copy of the host schedule, one element per thread",
        f'extern "C" __global__ void __launch_bounds__({COPY_KERNEL_BLOCK}) {name}(const {c_type}* __restrict__ source, {c_type}* __restrict__ target, long long count) {{',
        f"  const long long i = (long long)blockIdx.x * {COPY_KERNEL_BLOCK} + threadIdx.x;",
        "  if (i < count) target[i] = source[i];",
        "}",
    ]


def launch_names(module: Operation) -> dict[loop.KernelOp, list[str | None]]:
    """Names for kernel parameters the loop IR left unnamed: what the first
    launch passes (a program input or output, or a named temporary)."""
    names: dict[loop.KernelOp, list[str | None]] = {}
    for schedule in (op for op in module.walk() if isinstance(op, loop.ScheduleOp)):
        for launch in schedule.launches():
            kernel = launch.resolve()
            if kernel is not None and kernel not in names:
                names[kernel] = [base_buffer(v).name_hint if isinstance(v.type, MemRefType) else v.name_hint for v in launch.operands]
    return names


def fill_kernel(name: str, element: ScalarType, data: str, count: int) -> list[str]:
    """A kernel for the schedule's `loop.copy` of a constant into a buffer."""
    c_type = "long long" if element is index else C_STORAGE[element]
    value = f"{STORE_CONVERSION[element]}({data}[i])" if is_reduced_float(element) else f"{data}[i]"
    return [
        f"// {name}: a loop.copy of the host schedule, from the constant {data}",
        f'extern "C" __global__ void __launch_bounds__({COPY_KERNEL_BLOCK}) {name}({c_type}* __restrict__ target) {{',
        f"  const long long i = (long long)blockIdx.x * {COPY_KERNEL_BLOCK} + threadIdx.x;",
        f"  if (i < {count}) target[i] = {value};",
        "}",
    ]


def schedule_constant(value: Value) -> loop.ConstantOp | None:
    """The schedule's `loop.constant` that `value` is (a view at offset 0 of)."""
    while isinstance(value.defining_op, loop.ViewOp) and value.defining_op.offset == 0:
        value = value.defining_op.source
    op = value.defining_op
    return op if isinstance(op, loop.ConstantOp) and isinstance(op.parent_op, loop.ScheduleOp) else None


def baked_constants(module: Operation) -> dict[loop.KernelOp, dict[int, loop.ConstantOp]]:
    """Kernel arguments that every launch fills with the same schedule
    constant: the kernel reads the data directly, as a `__device__` array,
    and the parameter goes (kernels.json has no way to pass constant data)."""
    found: dict[loop.KernelOp, dict[int, loop.ConstantOp]] = {}
    for schedule in (op for op in module.walk() if isinstance(op, loop.ScheduleOp)):
        for launch in schedule.launches():
            kernel = launch.resolve()
            constants = {i: schedule_constant(v) for i, v in enumerate(launch.operands) if isinstance(v.type, MemRefType)}
            if kernel not in found:
                found[kernel] = {i: c for i, c in constants.items() if c is not None}
            elif any(found[kernel].get(i) is not c for i, c in constants.items()):
                raise EmitError(f"launches of @{kernel.sym_name} pass different constants (or a constant and a buffer) as one argument")
    return found


def emit_cuda(module: Operation, source_name: str | None = None) -> CudaSource:
    """The CUDA C translation unit for every GPU kernel of `module`."""
    kernels = [op for op in module.walk() if isinstance(op, loop.KernelOp)]
    restrict = restrict_safe_params(module)
    taken: set[str] = {kernel_c_name(k) for k in kernels}
    if len(taken) != len(kernels):
        raise EmitError("two kernels have the same name in C: " + ", ".join(sorted(k.sym_name for k in kernels)))

    # Constants of the schedule: file-scope data, read by kernels in place of an argument or copied by a fill kernel.
    baked = baked_constants(module)
    copies = [op for op in module.walk() if isinstance(op, loop.CopyOp)]
    fills = [op for op in copies if schedule_constant(op.source) is not None]
    data_names: dict[loop.ConstantOp, str] = {}  # -> the C expression reading it
    data_lines: list[str] = []
    for constant in [c for k in kernels for c in baked.get(k, {}).values()] + [schedule_constant(op.source) for op in fills]:
        if constant not in data_names:
            name = unique_global(c_identifier(constant.result.name_hint) or "constant", taken)
            lines, data_names[constant] = constant_array(name, constant, "a constant of the schedule")
            data_lines += lines

    hints = launch_names(module)
    emitters = [
        KernelEmitter(k, kernel_c_name(k), restrict[k], taken, hints.get(k, ()), {i: data_names[c] for i, c in baked.get(k, {}).items()})
        for k in kernels
    ]
    bodies = [em.emit() for em in emitters]
    copy_types = sorted({op.source.type.element_type for op in copies if op not in fills}, key=str)
    fill_names = {op: unique_global(f"fusecc_fill_{n}", taken) for n, op in enumerate(fills)}

    reduced = set().union(*(em.uses_reduced_float for em in emitters)) if emitters else set()
    count = len(kernels) + len(copy_types) + len(fills)
    lines = [f"// CUDA C generated by fusecc{' from ' + source_name if source_name else ''}: {count} kernel{'s' * (count != 1)}.",
             "// Launch geometry and arguments: the manifest (.json) beside this file. Float modes: docs/cuda-target.md."]
    lines += prelude_text().rstrip("\n").split("\n")
    if reduced or any(is_reduced_float(op.source.type.element_type) for op in copies):
        lines += PRELUDE_REDUCED_FLOAT.rstrip("\n").split("\n")
    if data_lines:
        lines += [""] + data_lines
    infos = []

    def add(body: list[str], info_args) -> None:
        lines.append("")
        first = len(lines) + 1
        lines.extend(body)
        infos.append(KernelInfo(*info_args[:7], (first, len(lines)), *info_args[7:]))

    for em, body in zip(emitters, bodies):
        if em.dynamic_shared:
            # The dynamic shared block is declared inside the kernel, before its body.
            open_at = next(i for i, text in enumerate(body) if text.startswith('extern "C"'))
            body = body[: open_at + 1] + ["  FUSECC_EXTERN_SHARED(unsigned char, fusecc_dynamic_shared);"] + body[open_at + 1 :]
        k = em.kernel
        estimate = (k.attr("tile.registers"), k.attr("tile.shared_memory")) if "tile.registers" in k.attributes else None
        add(em.data_lines + body, (em.name, k.sym_name, em.grid, em.block, em.static_shared, em.dynamic_shared, em.params, k.attr("group"), k.attr("kind"), tuple(sorted(em.baked)), estimate))
    for element in copy_types:
        c_type = "long long" if element is index else C_STORAGE[element]
        params = [KernelParam("source", f"const {c_type}* __restrict__", f"memref<?x{element}>"), KernelParam("target", f"{c_type}* __restrict__", f"memref<?x{element}>", True), KernelParam("count", "long long", "i64")]
        add(copy_kernel(element), (copy_kernel_name(element), "", (0, 1, 1), (COPY_KERNEL_BLOCK, 1, 1), 0, 0, params, None, "copy"))
    for op, name in fill_names.items():
        element, n = op.target.type.element_type, op.target.type.num_elements
        params = [KernelParam("target", f"{'long long' if element is index else C_STORAGE[element]}* __restrict__", str(op.target.type), True)]
        add(fill_kernel(name, element, data_names[schedule_constant(op.source)], n), (name, "", (-(-n // COPY_KERNEL_BLOCK), 1, 1), (COPY_KERNEL_BLOCK, 1, 1), 0, 0, params, None, "copy"))
    return CudaSource("\n".join(lines) + "\n", infos, fill_names)
