"""What a kernel needs on chip: registers per thread and shared memory per
block, for the tiles the tiler chooses (`geometry.choose_geometry`).

One estimate for the fusion cost model, which judges candidate groups with
it, and for the tiler, which writes it on each group (`tile.registers`,
`tile.shared_memory`); benchmarks/register_estimates.py compares it with
ptxas. A kernel body is a group's ops with its inputs and outputs
(`KernelBody`). Elementwise and row kernels: a base, two registers per
pointer and the peak number of live scalar values (a linear scan) for each
element a thread has in flight; row kernels add a partial per warp and
stat in shared memory. Matmul and attention kernels: the templates' own
estimates (`gpu_matmul_tiles.gpu_matmul_resources`, `gpu_attention_resources`:
accumulators, fragments, staged tiles). On the CPU a "register" is a
vector lane and "shared memory" the tiles a worker keeps in cache.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Sequence

from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.traits import ConstantLike, Contraction
from fusecc.compiler.types import TensorType
from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.tiling.attention_tiles import AttentionTiles, attention_stages, cpu_attention_resources, gpu_attention_resources
from fusecc.passes.tiling.contraction_shapes import AttentionShape, MatmulShape
from fusecc.passes.tiling.cpu_matmul_tiles import choose_cpu_matmul_tiles, cpu_matmul_resources
from fusecc.passes.tiling.gpu_matmul_tiles import GpuMatmulTiles, gpu_matmul_resources, gpu_matmul_stages, matmul_padded_operands
from fusecc.passes.tiling.geometry import TileConfig, choose_geometry, elements_per_thread
from fusecc.passes.tiling.parts import horizontal_parts

# Register bookkeeping on a GPU thread of an elementwise or row kernel:
# indices, loop counters, predicates (the contraction templates count their own).
GPU_BASE_REGISTERS = 16
REGISTERS_PER_POINTER = 2


def words(value: Value) -> int:
    """32-bit registers one element of `value` occupies."""
    t = value.type
    element = t.element_type if isinstance(t, TensorType) else t
    return max(1, (element.bitwidth + 31) // 32)


def is_splat_constant(value: Value) -> bool:
    op = value.defining_op
    return op is not None and op.has_trait(ConstantLike) and _is_splat(op.attributes["value"])


_SPLATS: dict[int, tuple[object, bool]] = {}


def _is_splat(attribute) -> bool:
    """`attribute.is_splat`, memoised by identity (it scans the array)."""
    found = _SPLATS.get(id(attribute))
    if found is None or found[0] is not attribute:
        if len(_SPLATS) > 4096:
            _SPLATS.clear()
        found = _SPLATS[id(attribute)] = (attribute, attribute.is_splat)
    return found[1]


def is_free_input(value: Value) -> bool:
    """Inputs that cost no memory traffic: splat constants become immediates."""
    return is_splat_constant(value)


class KernelBody:
    """A candidate or materialised group seen as ops, inputs and outputs."""

    def __init__(self, ops: Sequence[Operation], inputs: Sequence[Value], outputs: Sequence[Value], free: set[Value] = frozenset()):
        self.ops = [op for op in ops if not op.has_trait(ConstantLike)]
        self.members = set(self.ops)
        self.free = set(free)  # values read at no cost: splat constants
        for op in self.ops:
            for v in op.operands:
                if v.defining_op not in self.members and is_free_input(v):
                    self.free.add(v)
        self.inputs = [v for v in inputs if v not in self.free]
        self.outputs = list(outputs)
        self.output_set = set(outputs)


def peak_live_words(body: KernelBody) -> int:
    """Peak 32-bit values live at once when the body is evaluated in order."""
    last_use: dict[Value, int] = {}
    for index, op in enumerate(body.ops):
        for v in op.operands:
            last_use[v] = index
    live = peak = 0
    free = body.free
    loaded: set[Value] = set(free)
    for index, op in enumerate(body.ops):
        for v in op.operands:
            if v not in loaded and v.defining_op not in body.members:
                loaded.add(v)
                live += words(v)
        out = sum(words(r) for r in op.results)
        peak = max(peak, live + out)
        for r in op.results:
            if r in last_use:
                live += words(r)
        for v in set(op.operands):
            if last_use.get(v) == index and v not in free:
                live -= words(v)
    return peak


def body_geometry(body: KernelBody, kind: str, hardware: Hardware) -> TileConfig:
    """The tiles the tiler would choose for this body."""
    return choose_geometry(kind, body.ops, [v.type.shape for v in body.outputs], hardware)


def body_resources(body: KernelBody, kind: str, hardware: Hardware, tiles: TileConfig) -> tuple[int, int]:
    """(registers per thread, shared memory per block) of the kernel that
    lowers `body` as a `kind` group with `tiles`. On the CPU a "register" is
    a vector lane and "shared memory" the tiles a worker keeps in cache."""
    live = peak_live_words(body)
    pointers = len(body.inputs) + len(body.outputs)
    contraction = next((op for op in body.ops if op.has_trait(Contraction) or op.name == "tensor.attention"), None)
    if kind == "matmul" and contraction is not None:
        problem = MatmulShape.of_op(contraction)
        if not hardware.is_gpu:
            used = cpu_matmul_resources(choose_cpu_matmul_tiles(problem, hardware, tiles.block))
            return (live + 1) * hardware.warp_size + used.registers_per_thread, used.shared_bytes
        gpu = GpuMatmulTiles(*tiles.block, tiles.k, tiles.threads, gpu_matmul_stages(hardware))
        used = gpu_matmul_resources(gpu, problem.result.type.element_type, matmul_padded_operands(problem))
        # The epilogue runs after the k loop, in the registers the A and B
        # fragments held; only what it needs beyond them (side inputs' pointers
        # and its live values) adds up.
        tm, tn = gpu.micro_tile
        epilogue = REGISTERS_PER_POINTER * max(0, pointers - 3) + live
        return used.registers_per_thread + max(0, epilogue - tm - tn), used.shared_bytes
    if kind == "attention" and contraction is not None:
        problem = AttentionShape.of_op(contraction)
        if not hardware.is_gpu:
            used = cpu_attention_resources(AttentionTiles(*tiles.block), problem)
            return (live + 1) * hardware.warp_size + used.registers_per_thread, used.shared_bytes
        single = AttentionTiles(*tiles.block, tiles.threads, max(1, tiles.split))
        used = gpu_attention_resources(replace(single, stages=attention_stages(single, problem, hardware)), problem)
        return used.registers_per_thread + REGISTERS_PER_POINTER * max(0, pointers - 4), used.shared_bytes
    if not hardware.is_gpu:
        return (live + 1) * hardware.warp_size, 0
    # A row kernel keeps each statistic it reduced in a register for the epilogue.
    registers = GPU_BASE_REGISTERS + REGISTERS_PER_POINTER * pointers + elements_per_thread(tiles, hardware) * live + tiles.statistics
    return registers, tiles.shared_memory_bytes


def streaming_kernel_resources(pointers: int, live: int) -> tuple[int, int]:
    """(registers per thread, shared memory per block) of a kernel that takes
    one element per thread and keeps no tile: the split-K reduce and split-KV
    combine kernels a template launches after its tiled kernel (the group's
    `tile.*` estimate is the tiled kernel's)."""
    return GPU_BASE_REGISTERS + REGISTERS_PER_POINTER * pointers + live, 0


def external_inputs(ops: Iterable[Operation], members: set[Operation]) -> list[Value]:
    """Values the ops read that are defined outside them, in first-use order."""
    seen: dict[Value, None] = {}
    for op in ops:
        for v in op.operands:
            if v.defining_op not in members and v not in seen:
                seen[v] = None
    return list(seen)


def escaping_results(ops: Iterable[Operation], members: set[Operation]) -> list[Value]:
    """Results used outside the ops (by other ops or a terminator)."""
    return [r for op in ops for r in op.results if any(user not in members for user in r.users)]


def kernel_bodies(group: Operation) -> list[tuple[str, KernelBody]]:
    """(kind, body) of the group, or of each of its parts if horizontal."""
    kind = group.attr("kind")
    free = {arg for arg, value in zip(group.body.args, group.operands) if is_free_input(value)}
    if kind != "horizontal":
        return [(kind, KernelBody(group.body_ops(), group.body.args, group.yield_op.operands, free))]
    bodies = []
    for part_kind, ops in horizontal_parts(group):
        members = set(ops)
        outputs = [v for v in group.yield_op.operands if v.defining_op in members]
        bodies.append((part_kind, KernelBody(ops, external_inputs(ops, members), outputs, free)))
    return bodies


def kernel_resources(group: Operation, hardware: Hardware, tiles: TileConfig) -> tuple[int, int]:
    """(registers per thread, shared memory per block) of the kernel that
    lowers `group` with `tiles`: what the tiler writes as `tile.registers`
    and `tile.shared_memory`. With the tiler's own choice of tiles it is
    `estimate_group`'s figure; the parts of a horizontal group keep their
    own tiles: the hungriest part's registers, every part's shared memory."""
    bodies = kernel_bodies(group)
    if group.attr("kind") != "horizontal":
        ((kind, body),) = bodies
        return body_resources(body, kind, hardware, tiles)
    used = [body_resources(body, kind, hardware, body_geometry(body, kind, hardware)) for kind, body in bodies]
    return max(r for r, _ in used), sum(s for _, s in used)


__all__ = [
    "GPU_BASE_REGISTERS",
    "streaming_kernel_resources",
    "KernelBody",
    "REGISTERS_PER_POINTER",
    "body_geometry",
    "body_resources",
    "escaping_results",
    "external_inputs",
    "is_free_input",
    "is_splat_constant",
    "kernel_bodies",
    "kernel_resources",
    "peak_live_words",
    "words",
]
