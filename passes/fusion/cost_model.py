"""The fusion cost model: what a kernel costs, and whether fusing pays.

Every fusion decision goes through `decide`, which implements the seed's
decision guide (section 3.3) with the numbers of `compiler.hardware`:

1. Hardware limits first (seed 3.1, over-fusion): a candidate group that
   would need more registers per thread, more shared memory per block, or
   more ops than the target allows is refused, whatever it would save.
2. Then time: the candidate is fused when its modelled time is below the sum
   of the separate kernels' times. Each kernel costs one launch plus the
   larger of its memory time (bytes / bandwidth) and its compute time
   (flops / peak). So elementwise fusion almost always pays (it removes a
   launch and an intermediate's write and read), memory-bound fusions pay
   most, and a fusion that recomputes expensive work (a broadcast consumer
   re-evaluating an `exp` per output element) pays only when the traffic it
   saves outweighs the recomputation.

`fusion.force` on an op overrides both rules (never legality); the reason
says what was overridden.

Estimates (`estimate_ops` for a candidate set of top-level ops,
`estimate_group` for a materialised `fusion.group`) model the lowering that
`passes/fusion/fuse.py` documents for each group kind:

* bytes: every group input is read once (caches serve re-reads of tiles;
  of a table only gathered from, the gathered rows),
  every output written once; splat constants are free;
* flops: per-element weights per op (`FLOPS_PER_ELEMENT`), times how often
  the lowering evaluates the op (values inlined into a larger consumer are
  recomputed per consumer element: `recomputed_flops`);
* registers per thread and shared memory per block: the tiling level's
  estimate (`tiling/resources.py`) for the tiles the tiler will choose
  (`tiling/geometry.py`, `tiling/matmul_tiles.py`, `tiling/attention_tiles.py`), which the tiler writes
  on each group too: one figure for fusion decisions and tiles.

This module imports the tiling level and nothing above it: the tiler does
not import it either. Everything hardware-specific comes from
`passes/backends/hardware.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from fusecc.passes.backends.hardware import Hardware
from fusecc.passes.fusion.gpu_kernels import gpu_launch_and_shared, split_k_bytes, split_kv_bytes
from fusecc.passes.fusion.gpu_time import GpuLaunch, GpuTime, GpuWork, gpu_kernel_time, roofline_seconds
from fusecc.passes.fusion.op_work import (  # noqa: F401  (re-exported: the passes ask `cost_model` for them)
    FLOPS_PER_ELEMENT,
    MMA_MAX_HEAD_DIM,
    MMA_MIN_SM,
    byte_size,
    contraction_unit,
    flops_per_element,
    is_attention,
    is_cheap,
    is_float16,
    is_row_composite,
    numel,
    op_flops,
    shape_of,
    unit_peak,
)
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.traits import Composite, Contraction, Elementwise, Injective, Reduction
from fusecc.compiler.types import TensorType
from fusecc.passes.tiling.attention_tiles import choose_attention_tiles
from fusecc.passes.tiling.contraction_shapes import MAX_SPECIALISED_COPIES, AttentionShape, MatmulShape, at_hints
from fusecc.passes.tiling.matmul_tiles import choose_matmul_tiles, reload_factors
from fusecc.passes.tiling.geometry import ELEMENTS_PER_THREAD
from fusecc.passes.tiling.parts import infer_kind
from fusecc.passes.tiling.resources import (
    REGISTERS_PER_POINTER,
    KernelBody,
    body_geometry,
    body_resources,
    escaping_results,
    external_inputs,
    is_free_input,
    is_splat_constant,
    kernel_bodies,
)

# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class GroupCost:
    """The modelled cost of one kernel (a fusion group, or one unfused op)."""

    kind: str
    ops: int
    bytes_read: int
    bytes_written: int
    flops: float
    recomputed_flops: float
    registers_per_thread: int
    shared_memory_bytes: int
    compute_seconds: float
    time_seconds: float
    # GPUs only (gpu_time.py): the launch, its work, and the modelled time of
    # each pipe; the roofline bound of the same work.
    launch: GpuLaunch | None = None
    work: GpuWork | None = None
    gpu: GpuTime | None = None
    roofline_seconds: float | None = None

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.bytes_written


@dataclass(frozen=True)
class Decision:
    """The outcome of `decide`: whether to fuse, and a sentence saying why."""

    fuse: bool
    reason: str
    saved_seconds: float
    saved_bytes: int
    limit: str | None = None  # the broken hardware limit, if any


# --------------------------------------------------------------------------- formatting


def format_bytes(n: float) -> str:
    """Memory traffic in decimal units, as bandwidth figures are quoted."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def format_kib(n: float) -> str:
    """On-chip memory in binary units, as datasheets quote it."""
    return f"{n / 1024:.1f} KiB"


def format_time(seconds: float) -> str:
    if abs(seconds) >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


# --------------------------------------------------------------------------- estimation


def _evaluations(body: KernelBody, kind: str, hardware: Hardware) -> dict[Operation, float]:
    """How many times the lowering evaluates each op (>= its element count
    when the op is inlined into a consumer that reads it at more points)."""
    evals: dict[Operation, float] = {}
    rows = _row_elements(body)
    for op in reversed(body.ops):
        own = numel(op.results[0]) if op.results else 1
        materialised = (
            not (op.has_trait(Elementwise) or op.has_trait(Injective))
            or (kind == "reduction" and rows is not None and own <= rows[0])
        )
        if materialised:
            evals[op] = own
            continue
        count = own if any(r in body.output_set for r in op.results) else 0
        for result in op.results:
            for user in result.users:
                if user in body.members:
                    count = max(count, _reads(user, result, evals, hardware))
        evals[op] = max(count, own) if count else own
    return evals


def _reads(user: Operation, value: Value, evals, hardware: Hardware) -> float:
    """Element reads of `value` made by `user` in the lowered kernel."""
    if user.has_trait(Contraction):
        problem = at_hints(MatmulShape.of_op(user))
        a_reads, b_reads = reload_factors(problem, choose_matmul_tiles(problem, hardware))
        return numel(value) * (a_reads if value is user.operands[0] else b_reads)
    if is_attention(user):
        if value is user.operands[0]:
            return numel(value)
        problem = at_hints(AttentionShape.of_op(user))
        return numel(value) * math.ceil(problem.s / choose_attention_tiles(problem, hardware).block_q)
    if user.has_trait(Reduction) or user.has_trait(Composite):
        return numel(value)
    per_user = evals.get(user, numel(user.results[0]))
    if user.name == "tensor.concat":
        return per_user * numel(value) / max(1, numel(user.result))
    return per_user


def _row_elements(body: KernelBody) -> tuple[int, int] | None:
    """(rows, row length) of a row-wise reduction group, from its first
    reduction or normalising composite."""
    for op in body.ops:
        if op.has_trait(Reduction):
            x = op.operands[0]
            axes = op.normalized_axes
            length = 1
            for a in axes:
                length *= shape_of(x)[a]
            return numel(x) // max(1, length), length
        if is_row_composite(op):
            x = op.operands[0]
            axis = op.attr("axis", -1) if op.name == "tensor.softmax" else -1
            length = shape_of(x)[axis]
            return numel(x) // max(1, length), length
    return None


def register_growth_per_value(hardware: Hardware) -> int:
    """At most how many registers one more value read or written adds to an
    elementwise or matmul group whose shapes do not grow: a pointer and a
    live value per element a thread computes."""
    return REGISTERS_PER_POINTER + ELEMENTS_PER_THREAD if hardware.is_gpu else 2 * hardware.warp_size


def _input_bytes(value: Value, body: KernelBody) -> int:
    """The bytes a group reads of an input: all of them, except for a table
    that is only gathered from, of which at most the gathered rows."""
    users = [u for u in value.users if u in body.members]
    if users and all(u.name == "tensor.gather" and u.operands[0] is value and u.operands[1] is not value for u in users):
        return min(byte_size(value), sum(byte_size(u.results[0]) for u in users))
    return byte_size(value)


def _has_dynamic_shape(body: KernelBody) -> bool:
    return any(isinstance(r.type, TensorType) and not r.type.is_static for op in body.ops for r in (*op.results, *op.operands))


def _estimate(body: KernelBody, kind: str, hardware: Hardware) -> GroupCost:
    bytes_read = sum(_input_bytes(v, body) for v in body.inputs)
    bytes_written = sum(byte_size(v) for v in body.outputs)
    evals = _evaluations(body, kind, hardware)
    tensor_flops = other_flops = recomputed = 0.0
    tensor_unit = "tensor"
    for op in body.ops:
        core, other = op_flops(op, hardware)
        if core:
            tensor_unit = contraction_unit(op, hardware)
        own = numel(op.results[0]) if op.results else 1
        factor = evals.get(op, own) / max(1, own)
        tensor_flops += core
        other_flops += other * factor
        recomputed += other * (factor - 1)
    tensor_peak = unit_peak(tensor_unit, hardware)
    dynamic = _has_dynamic_shape(body)
    if not dynamic:
        geometry = body_geometry(body, kind, hardware)
        registers, shared = body_resources(body, kind, hardware, geometry)
    else:
        # Tiles follow the sizes, which a dynamic body does not have: it is
        # ranked by its roofline at the --shape-hint sizes (docs/dynamic-shapes.md).
        registers, shared = 0, 0
    launch = work = gpu = roofline = None
    if hardware.is_gpu and not dynamic:
        rows = _row_elements(body)
        launch, requests, instructions = gpu_launch_and_shared(body, kind, geometry, int(registers), int(shared), rows, hardware, on_tensor_cores=tensor_flops > 0)
        partials = split_kv_bytes(body, geometry) + (0.0 if tensor_flops else split_k_bytes(body, geometry, hardware))
        work = GpuWork(bytes_read + bytes_written, fma_flops=other_flops, tensor_flops=tensor_flops, tensor_peak=tensor_peak, tensor_unit=tensor_unit, shared_requests=requests, shared_instructions=instructions, partial_bytes=partials)
        gpu = gpu_kernel_time(launch, work, hardware)
        compute, time, roofline = gpu.compute_seconds, gpu.seconds, roofline_seconds(work, hardware)
    else:
        compute = tensor_flops / tensor_peak + other_flops / hardware.peak_flops
        memory = (bytes_read + bytes_written) / hardware.memory_bandwidth
        time = hardware.launch_overhead + max(compute, memory)
    return GroupCost(
        kind=kind,
        ops=len(body.ops),
        bytes_read=bytes_read,
        bytes_written=bytes_written,
        flops=tensor_flops + other_flops,
        recomputed_flops=recomputed,
        registers_per_thread=int(registers),
        shared_memory_bytes=int(shared),
        compute_seconds=compute,
        time_seconds=time,
        launch=launch,
        work=work,
        gpu=gpu,
        roofline_seconds=roofline,
    )


def estimate_ops(ops: Sequence[Operation], hardware: Hardware, kind: str | None = None, outputs: Sequence[Value] | None = None) -> GroupCost:
    """Cost of a candidate group made of these top-level ops (program order).

    Its inputs are the values the ops read from outside, its outputs the
    results used outside (or `outputs`, for ops not yet in the IR)."""
    members = set(ops)
    body = KernelBody(ops, external_inputs(ops, members), escaping_results(ops, members) if outputs is None else outputs)
    return _estimate(body, kind or infer_kind(body.ops), hardware)


def combine_horizontal(parts: Sequence[GroupCost], hardware: Hardware, shared_input_bytes: int = 0) -> GroupCost:
    """One launch running independent parts side by side: traffic, work and
    shared memory (every part's buffers are declared in the kernel) add up;
    registers are those of the hungriest part (a block runs one part)."""
    bytes_read = sum(p.bytes_read for p in parts) - shared_input_bytes
    bytes_written = sum(p.bytes_written for p in parts)
    compute = sum(p.compute_seconds for p in parts)
    memory = (bytes_read + bytes_written) / hardware.memory_bandwidth
    time = hardware.launch_overhead + max(memory, compute)
    launch = work = gpu = roofline = None
    if hardware.is_gpu and all(p.launch is not None and p.work is not None for p in parts):
        # One grid of every part's blocks; a block runs one part, so it
        # needs the hungriest part's registers and every part's shared
        # memory, and keeps the most any part keeps in flight.
        launch = GpuLaunch(
            blocks=sum(p.launch.blocks for p in parts),
            threads=max(p.launch.threads for p in parts),
            registers=max(p.launch.registers for p in parts),
            shared_bytes=sum(p.launch.shared_bytes for p in parts),
            bytes_in_flight_per_thread=max(p.launch.bytes_in_flight_per_thread for p in parts),
        )
        work = GpuWork(
            bytes_read + bytes_written,
            fma_flops=sum(p.work.fma_flops for p in parts),
            tensor_flops=sum(p.work.tensor_flops for p in parts),
            tensor_peak=next((p.work.tensor_peak for p in parts if p.work.tensor_flops), hardware.peak_tensor_flops),
            tensor_unit=next((p.work.tensor_unit for p in parts if p.work.tensor_flops), "tensor"),
            shared_requests=sum(p.work.shared_requests for p in parts),
            shared_instructions=sum(p.work.shared_instructions for p in parts),
        )
        gpu = gpu_kernel_time(launch, work, hardware)
        compute, time, roofline = gpu.compute_seconds, gpu.seconds, roofline_seconds(work, hardware)
    return GroupCost(
        kind="horizontal",
        ops=sum(p.ops for p in parts),
        bytes_read=bytes_read,
        bytes_written=bytes_written,
        flops=sum(p.flops for p in parts),
        recomputed_flops=sum(p.recomputed_flops for p in parts),
        registers_per_thread=max(p.registers_per_thread for p in parts),
        shared_memory_bytes=sum(p.shared_memory_bytes for p in parts),
        compute_seconds=compute,
        time_seconds=time,
        launch=launch,
        work=work,
        gpu=gpu,
        roofline_seconds=roofline,
    )


def estimate_group(group: Operation, hardware: Hardware) -> GroupCost:
    """Cost of a materialised `fusion.group`."""
    bodies = kernel_bodies(group)
    if group.attr("kind") != "horizontal":
        ((kind, body),) = bodies
        return _estimate(body, kind, hardware)
    costs = [_estimate(body, kind, hardware) for kind, body in bodies]
    read = {v for _, body in bodies for v in body.inputs}
    shared_input_bytes = sum(c.bytes_read for c in costs) - sum(byte_size(v) for v in read)
    return combine_horizontal(costs, hardware, shared_input_bytes=shared_input_bytes)


# --------------------------------------------------------------------------- the decision


def check_limits(cost: GroupCost, hardware: Hardware) -> str | None:
    """The first hardware limit `cost` breaks, as a phrase, or None."""
    if cost.ops > hardware.max_ops_per_group:
        return f"group would have {cost.ops} ops > {hardware.max_ops_per_group} (max ops per group on {hardware.name})"
    if cost.registers_per_thread > hardware.registers_per_thread:
        return f"est. {cost.registers_per_thread} registers/thread > {hardware.registers_per_thread}"
    if cost.shared_memory_bytes > hardware.shared_memory_per_block:
        return f"est. {format_kib(cost.shared_memory_bytes)} shared memory > {format_kib(hardware.shared_memory_per_block)} per block"
    return None


def decide(parts: Sequence[GroupCost], fused: GroupCost, hardware: Hardware, forced: bool = False) -> Decision:
    """Whether to replace the kernels `parts` by the one kernel `fused`."""
    separate = sum(p.time_seconds for p in parts)
    saved_seconds = separate - fused.time_seconds
    saved_bytes = sum(p.bytes_moved for p in parts) - fused.bytes_moved
    limit = check_limits(fused, hardware)
    if limit is None and saved_seconds <= 0:
        limit_or_loss = (
            f"not profitable: est. {format_time(fused.time_seconds)} fused vs {format_time(separate)} separate"
            + (f" (recomputes {fused.recomputed_flops / 1e6:.1f} Mflop)" if fused.recomputed_flops else "")
        )
    else:
        limit_or_loss = limit
    if limit_or_loss is not None:
        if forced:
            return Decision(True, f"forced by fusion.force despite {limit_or_loss}", saved_seconds, saved_bytes, limit)
        return Decision(False, limit_or_loss, saved_seconds, saved_bytes, limit)
    return Decision(True, describe_saving(saved_bytes, len(parts) - 1, saved_seconds), saved_seconds, saved_bytes)


def sibling_merge_refusal(count: int) -> str | None:
    """Why `count` sibling matmuls must not be merged on concatenated
    weights whatever the saving, or None.

    The merge pays only because the matmul lowering reads the concatenated
    weights piece by piece: one specialised inner loop per piece, the piece
    chosen once per output tile, so the merged kernel does the separate
    kernels' work (passes/lowering/matmul.py, `MatmulProblem.piece_bounds`).
    Past MAX_SPECIALISED_COPIES pieces it chooses the piece per element
    inside the K loop, which measured 3-8x slower than the separate
    matmuls on the CPU (docs/fusion.md), and is no better on a GPU."""
    if count > MAX_SPECIALISED_COPIES:
        return f"the matmul lowering reads at most {MAX_SPECIALISED_COPIES} concatenated weights piece by piece, and {count} would be chosen per element inside the K loop"
    return None


def sibling_merge_saving(count: int, shared_input_bytes: int, reread_bytes: int, hardware: Hardware) -> float:
    """Seconds saved by merging `count` sibling matmuls into one on
    concatenated weights: count-1 launches and count-1 reads of the shared
    input, minus writing and re-reading `reread_bytes` of results whose own
    epilogues could otherwise have fused into their matmuls. (The merged
    matmul itself costs what the separate ones do: its lowering keeps their
    tiles, piece by piece; see `sibling_merge_refusal` for when it cannot.)"""
    launches = (count - 1) * hardware.launch_overhead
    reads = (count - 1) * shared_input_bytes / hardware.memory_bandwidth
    penalty = 2 * reread_bytes / hardware.memory_bandwidth
    return launches + reads - penalty


def describe_saving(saved_bytes: int, launches: int, saved_seconds: float) -> str:
    parts = []
    if saved_bytes > 0:
        parts.append(f"{format_bytes(saved_bytes)} of memory traffic")
    if launches > 0:
        parts.append(f"{launches} launch{'es' * (launches != 1)}")
    what = " and ".join(parts) if parts else "nothing measurable"
    return f"saves {what} (est. {format_time(saved_seconds)})"


__all__ = [
    "infer_kind",
    "Decision",
    "FLOPS_PER_ELEMENT",
    "GroupCost",
    "check_limits",
    "combine_horizontal",
    "decide",
    "estimate_group",
    "estimate_ops",
    "escaping_results",
    "external_inputs",
    "is_free_input",
    "is_splat_constant",
    "register_growth_per_value",
    "format_bytes",
    "format_kib",
    "format_time",
    "sibling_merge_refusal",
    "sibling_merge_saving",
]
