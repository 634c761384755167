"""The loop dialect's memory ops in CUDA C, as `KernelRenderer` methods
(`kernel.py`'s STRUCTURE table): `loop.alloc` (`__shared__` arrays, an
offset into dynamic shared memory, or a zeroed per-thread array),
`loop.constant` (file-scope `__device__ const` data), `loop.view`, and
`loop.load`/`loop.store` over row-major flattened indices (a guarded load
a conditional expression with the padding value; a guarded store an `if`;
a block-level store once per block, on thread 0)."""

from __future__ import annotations

from fusecc.dialects import loop
from fusecc.passes.backends.cuda.c_text import LOAD_CONVERSION, STORE_CONVERSION, c_identifier, constant_array, is_reduced_float, unique_global
from fusecc.passes.backends.cuda.vector_memory import RENDERERS as VECTOR_MEMORY_RENDERERS
from fusecc.passes.lowering.barriers import in_thread_loop
from fusecc.passes.lowering.buffer_facts import base_buffer


def flat_index(shape, indices: list[str]) -> str:
    """The row-major offset of C index expressions into a buffer of `shape`
    (sizes are ints, or C names of `?` sizes)."""
    terms = []
    stride = 1
    for size, expr in reversed(list(zip(shape, indices))):
        if expr != "0":
            terms.append(expr if stride == 1 else f"{expr} * {stride}")
        stride = stride * size if isinstance(size, int) and isinstance(stride, int) else size if stride == 1 else f"{stride} * {size}"
    return " + ".join(reversed(terms)) or "0"


def vector_accessed(buffer) -> bool:
    """Is `buffer`, or a view of it, accessed by a vector load or store or a
    cp.async? Then it needs 16-byte alignment: a shared array of floats is
    only 4-byte aligned otherwise (fuzz seed 2985: a K = 0 matmul zeroes its
    output tile, a view of the A tile, with float4 stores)."""
    for user in buffer.users:
        if user.name in VECTOR_MEMORY_RENDERERS:
            return True
        if isinstance(user, loop.ViewOp) and user.source is buffer and vector_accessed(user.result):
            return True
    return False


def render_alloc(self, op: loop.AllocOp) -> None:
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
        align = "__align__(16) " if vector_accessed(op.result) else ""  # vector loads, cp.async
        self.line(f"__shared__ {align}{c_type} {name}[{count}];{dims}")


def render_constant(self, op: loop.ConstantOp) -> None:
    name = unique_global(f"{self.name}_{c_identifier(op.result.name_hint) or 'data'}", self.globals_taken)
    lines, self.c[op.result] = constant_array(name, op, f"read by {self.name}")
    self.data_lines += lines


def render_view(self, op: loop.ViewOp) -> None:
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


def render_load(self, op: loop.LoadOp) -> None:
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


def render_store(self, op: loop.StoreOp) -> None:
    t = op.buffer.type.element_type
    value = self.e(op.value)
    if is_reduced_float(t):
        value = f"{STORE_CONVERSION[t]}({value})"
    statement = f"{self.element(op.buffer, op.indices)} = {value};"
    conditions = []
    if not in_thread_loop(op):
        if self.block[0] * self.block[1] * self.block[2] > 1:
            conditions.append("threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0")
    if op.guard is not None:
        conditions.append(self.e(op.guard))
    if conditions:
        statement = f"if ({' && '.join(conditions)}) {statement}"
        if len(conditions) > 1 or op.guard is None:
            statement += "  // block-level store: once per block"
    self.line(statement)


RENDERERS = {
    "loop.alloc": render_alloc,
    "loop.constant": render_constant,
    "loop.view": render_view,
    "loop.load": render_load,
    "loop.store": render_store,
}
