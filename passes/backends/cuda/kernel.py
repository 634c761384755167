"""One CUDA kernel's C function, from legal GPU-mapped loop IR.

The renderer walks the kernel and prints it; it decides nothing about
semantics (legalize has, docs/legalize.md) nor about synchronisation
(place-barriers has put every `loop.barrier`), and its launch (grid, block,
index type, shared memory) is launch_geometry.py's. `arith`/`math` ops come
from the table (op_table.py); the ops with regions are its methods, the
memory ops memory_ops.py's (vector_memory.py's, mma.py's, dynamic_sizes.py's
for the loop_vector, nvgpu and `?`-size ops):

  * the block-mapped `loop.parallel` at the top gives the grid and binds its
    induction variables to `blockIdx`; the code around and inside it is
    block-level code, which every thread of the block runs (it is uniform);
    block-level stores run once per block, on thread 0;
  * each thread-mapped `loop.parallel` (the block's extents) binds its
    variables to `threadIdx` and becomes a scoped section every thread runs;
  * `loop.barrier` is `__syncthreads()`, `loop.shuffle_xor` is
    `__shfl_xor_sync(0xffffffff, v, offset)`;
  * `loop.alloc` makes `__shared__` arrays (dynamic shared memory past 48 KB)
    or per-thread arrays for `local`, zeroed like the interpreter's;
    `loop.constant` makes file-scope `__device__ const` data;
  * multi-dimensional indices are flattened row-major; a guarded load is a
    conditional expression with the padding value, a guarded store an `if`.

Scalars are C locals named after the IR's SSA names where it has them.
f16/bf16 values live in `float` registers, exactly (legalize's casts are
the roundings); in memory they are `__half`/`__nv_bfloat16`.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusecc.compiler.ir import Block, Operation, Value
from fusecc.compiler.types import MemRefType, ScalarType, f32, i1, index
from fusecc.dialects import loop
from fusecc.passes.backends.cuda.c_text import (
    C_STORAGE,
    EmitError,
    LOAD_CONVERSION,
    ScopedNames,
    anonymous_prefix,
    c_identifier,
    float_literal,
    format_location,
    int_literal,
    is_reduced_float,
)
from fusecc.passes.backends.cuda.dynamic_sizes import c_shape, grid_in_params, render_dim, size_params
from fusecc.passes.backends.cuda.launch_geometry import choose_index_type, gpu_structure, plan_shared
from fusecc.passes.backends.cuda.memory_ops import RENDERERS as MEMORY_RENDERERS
from fusecc.passes.backends.cuda.memory_ops import flat_index
from fusecc.passes.backends.cuda.mma import render_mma
from fusecc.passes.backends.cuda.op_table import CODE_FOR_OP
from fusecc.passes.backends.cuda.vector_memory import RENDERERS as VECTOR_MEMORY_RENDERERS
from fusecc.passes.backends.table import handler_for
from fusecc.passes.lowering.buffer_facts import base_buffer, written_buffers

NARROW_CARRIERS = ("arith.constant", "arith.cast", "arith.select")  # the only arith ops with f16/bf16 results in legal IR


@dataclass
class KernelParam:
    name: str
    c_type: str  # as declared, e.g. "const float* __restrict__"
    type: str  # the IR type, e.g. "memref<4x100xf32>"
    written: bool = False


def comment_lines(k: loop.KernelOp, name: str, grid, block, static_shared: int, dynamic_shared: int) -> list[str]:
    """The comment above a kernel: what it implements, where from, its launch."""
    group, kind = k.attr("group"), k.attr("kind")
    what = []
    if group is not None:
        what.append(f"fusion group {group}")
    if kind:
        what.append(f"({kind})" if what else kind)
    out = [f"// {name}: {' '.join(what) or 'kernel'}" + ("" if name == k.sym_name else f" (@{k.sym_name} in the loop IR)")]
    where = format_location(k.location)
    if where:
        out.append("// source: " + ", ".join(where))
    if k.attr("source"):
        out.append("// ops: " + k.attr("source"))
    shared = []
    if static_shared:
        shared.append(f"{static_shared} bytes of static shared memory")
    if dynamic_shared:
        shared.append(f"{dynamic_shared} bytes of dynamic shared memory")
    launch = f"// launch: grid ({', '.join(map(str, grid))}), block ({', '.join(map(str, block))})"
    return out + [launch + (", " + ", ".join(shared) if shared else "")]


def signature(self: "KernelRenderer") -> tuple[list[KernelParam], list[str]]:
    """The kernel's parameters, and the prologue converting f16/bf16 scalars
    (passed in their storage type) to float."""
    params: list[KernelParam] = []
    prologue: list[str] = []
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
            prologue.append(f"  const float {name} = {LOAD_CONVERSION[t]}({raw});")
        else:
            params.append(KernelParam(name, self.value_type(t), str(t)))
    return params + [KernelParam(*p) for p in size_params(self)], prologue


# --------------------------------------------------------------------------- the renderer


class KernelRenderer:
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
        self.index_type = choose_index_type(kernel)
        self.grid, self.block = gpu_structure(kernel)
        self.shared_layout, self.static_shared, self.dynamic_shared = plan_shared(kernel)
        self.narrow_types: set[ScalarType] = set()  # f16/bf16 types the kernel uses (the prelude's conversions)
        self.written = written_buffers(kernel)
        self.mma_kinds: set[str] = set()  # nvgpu.mma_sync kinds used (the prelude's helpers, mma.py)
        self.uses_vector_memory = False  # loop.load_vector / copy_async (the prelude's helpers, vector_memory.py)
        self.sizes: dict[tuple[Value, int], str] = {}  # (argument, `?` axis) -> its size parameter
        self.size_args: list[tuple[int, int]] = []  # (argument index, axis) of each size parameter, in order

    def is_constant(self, buffer: Value) -> bool:
        """Whether `buffer` is constant data (kept as f32 for f16/bf16)."""
        base = base_buffer(buffer)
        return isinstance(base.defining_op, loop.ConstantOp) or base in self.baked_args

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
            self.uses_narrow(t)
            return "float"
        return C_STORAGE[t]

    def storage_type(self, t: ScalarType) -> str:
        if is_reduced_float(t):
            self.uses_narrow(t)
        return "long long" if t is index else C_STORAGE[t]  # index buffers hold i64, as in the interpreter

    def uses_narrow(self, t: ScalarType) -> None:
        self.narrow_types.add(t)

    def e(self, value: Value) -> str:
        try:
            return self.c[value]
        except KeyError:
            raise EmitError(f"kernel @{self.kernel.sym_name}: a value of type {value.type} is used before the emitter defined it") from None

    def literal(self, value, t: ScalarType) -> str:
        if t.is_float:
            if isinstance(value, bool):
                value = float(value)
            return float_literal(float(value), f32 if is_reduced_float(t) else t)
        if t is i1:
            return "true" if value else "false"
        return int_literal(int(value), self.value_type(t))

    # --- the kernel ------------------------------------------------------------------
    def render(self) -> list[str]:
        params, prologue = signature(self)
        body_start = len(self.lines)
        for op in self.kernel.body:
            self.render_op(op)
        body = self.lines[body_start:]
        self.lines = self.lines[:body_start]
        self.params = params
        header = comment_lines(self.kernel, self.name, grid_in_params(self), self.block, self.static_shared, self.dynamic_shared)
        bounds = max(1, self.block[0] * self.block[1] * self.block[2])  # an empty block is never launched
        param_text = ", ".join(f"{p.c_type} {p.name}" for p in params)
        out = header + [f'extern "C" __global__ void __launch_bounds__({bounds}) {self.name}({param_text}) {{']
        return out + prologue + body + ["}"]

    # --- ops -----------------------------------------------------------------------
    def render_block(self, block: Block) -> list[Value]:
        """Render the ops of `block`; returns the values its terminator yields."""
        for op in block:
            if isinstance(op, (loop.YieldOp, loop.ReturnOp)):
                return list(op.operands)
            self.render_op(op)
        return []

    def render_op(self, op: Operation) -> None:
        structural = self.STRUCTURE.get(op.name)
        if structural is not None:
            structural(self, op)
            return
        if op.name.split(".")[0] not in ("arith", "math"):
            raise EmitError(f"the CUDA backend does not handle '{op.name}' (kernel @{self.kernel.sym_name})")
        handler = handler_for(CODE_FOR_OP, op)
        narrow = any(is_reduced_float(r.type) for r in op.results) and op.name not in NARROW_CARRIERS
        if handler is None or narrow:
            raise EmitError(f"'{op.name}' on {', '.join(str(v.type) for v in op.operands) or op.result.type} is not legal CUDA-level IR "
                            f"(kernel @{self.kernel.sym_name}): run legalize first (docs/legalize.md)")
        args = [self.e(v) for v in op.operands]
        expr = handler(self, op, *args)
        if op.name == "arith.constant" or expr in args:
            self.c[op.result] = expr  # literals are used in place, and so is a value a cast leaves as it is
        else:
            self.define(op.result, expr)

    def render_barrier(self, op) -> None:
        self.line("__syncthreads();")

    def render_return(self, op) -> None:
        pass

    def render_parallel(self, op: loop.ParallelOp) -> None:
        if op.maps_blocks:
            for arg, mapping in zip(op.induction_vars, op.mapping):
                self.define(arg, f"blockIdx.{mapping[-1]}")
            self.render_block(op.body)
            return
        if op.maps_threads:
            self.names.push()
            self.open(f"{{  // every thread of the block ({' x '.join(map(str, op.upper))})")
            for arg, mapping in zip(op.induction_vars, op.mapping):
                self.define(arg, f"threadIdx.{mapping[-1]}")
            self.render_block(op.body)
            self.close()
            return
        for arg, upper in zip(op.induction_vars, op.extents):  # a sequential nest
            upper = self.e(upper) if isinstance(upper, Value) else upper
            self.names.push()
            i = self.name_for(arg, "i")
            self.open(f"for ({self.index_type} {i} = 0; {i} < {upper}; ++{i}) {{")
        self.render_block(op.body)
        for _ in op.upper:
            self.close()

    def render_for(self, op: loop.ForOp) -> None:
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
        yielded = self.render_block(op.body)
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

    def render_if(self, op: loop.IfOp) -> None:
        targets = []
        for r in op.results:
            name = self.name_for(r)
            self.line(f"{self.value_type(r.type)} {name};")
            targets.append(name)
        self.names.push()
        self.open(f"if ({self.e(op.condition)}) {{")
        self.assign(targets, self.render_block(op.then_block), set())
        if op.results or any(not isinstance(o, loop.YieldOp) for o in op.else_block):
            self.names.pop()
            self.names.push()
            self.depth -= 1
            self.line("} else {")
            self.depth += 1
            self.assign(targets, self.render_block(op.else_block), set())
        self.close()

    def render_shuffle_xor(self, op) -> None:
        threads = self.block[0] * self.block[1] * self.block[2]
        if threads % 32:
            raise EmitError(f"kernel @{self.kernel.sym_name}: a warp shuffle in a block of {threads} threads (not a whole number of warps)")
        t = op.value.type
        if t is i1:
            self.define(op.result, f"__shfl_xor_sync(0xffffffffu, (int){self.e(op.value)}, {op.offset}) != 0")
        else:
            self.define(op.result, f"__shfl_xor_sync(0xffffffffu, {self.e(op.value)}, {op.offset})")

    def element(self, buffer: Value, indices) -> str:
        return f"{self.e(buffer)}[{flat_index(c_shape(self, buffer), [self.e(i) for i in indices])}]"

    STRUCTURE = {
        "loop.parallel": render_parallel,
        "loop.for": render_for,
        "loop.if": render_if,
        "loop.barrier": render_barrier,
        "loop.return": render_return,
        "loop.shuffle_xor": render_shuffle_xor,
        **MEMORY_RENDERERS,
        "loop.dim": render_dim,
        "nvgpu.mma_sync": render_mma,
        **VECTOR_MEMORY_RENDERERS,
    }
