"""Hardware descriptions: the limits and speeds that fusion and tiling obey.

Figures are from vendor datasheets (H200, A100 SXM) and from measurements
on our 2-core CI machines (the `cpu` entry, see ../shared/toolchain-notes.md).
The cost model, the tiler and the CUDA emitter all read these; nothing else
hard-codes a hardware number.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Hardware:
    name: str
    kind: str  # "gpu" or "cpu"
    arch: str  # "sm_90", "sm_80", or "x86-64"
    memory_bandwidth: float  # bytes per second, sustained
    peak_flops: float  # fp32 FLOP/s (non-tensor-core on GPUs)
    peak_tensor_flops: float  # FLOP/s for f16/bf16 matmul on tensor cores; = peak_flops on CPU
    launch_overhead: float  # seconds per kernel launch (or per parallel region on CPU)
    registers_per_thread: int  # hardware maximum per thread
    registers_per_sm: int
    shared_memory_per_block: int  # bytes, the opt-in maximum
    shared_memory_per_sm: int
    max_threads_per_block: int
    warp_size: int
    sm_count: int  # streaming multiprocessors, or cores on a CPU
    max_ops_per_group: int  # beyond this, compile time grows without benefit (a 100-op elementwise chain still fits)
    cache_bytes: int  # L2 (GPU) or last-level cache (CPU)
    buffer_alignment: int = 64  # bytes; arena buffers start at multiples of this (cudaMalloc gives 256)
    # FP32 FMA lanes per SM over the 32-bit words its shared memory delivers per
    # clock (32 banks): how many FMAs a thread must issue per shared load for the
    # FMA units, not shared memory, to set the pace. 128/32 on sm_90, 64/32 on sm_80.
    fma_per_shared_word: int = 1
    # Physical ceilings, for checking measurements (no kernel can beat them),
    # never for modelling: the most FLOP/s the chip's FMA units can issue, and
    # the most bytes/s its closest memory (L1) delivers summed over cores/SMs,
    # so that data already in cache is bounded too. 0 means: use the peaks above.
    ceiling_flops: float = 0.0
    ceiling_bandwidth: float = 0.0
    # What occupancy and latency hiding depend on (GPUs; the CUDA occupancy
    # calculator's rules, which are the same on sm_80 and sm_90): registers
    # are allocated per warp in units of 256, the system keeps 1 KB of shared
    # memory per block, an SM holds at most 2048 threads and 32 blocks.
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    register_allocation_unit: int = 256
    reserved_shared_per_block: int = 1024
    # FLOP/s of f32 matmuls on tensor cores with TF32 inputs (only under
    # --allow-tf32); 0: no TF32 unit, f32 runs on the FMA units.
    peak_tf32_flops: float = 0.0
    clock_hz: float = 0.0  # boost clock: shared memory serves 32 banks x 4 B per clock per SM
    memory_latency: float = 0.0  # seconds from a global load's issue to its data (DRAM, L2 miss)
    tf32_matmuls: bool = False  # f32 matmuls may run on TF32 tensor cores (--allow-tf32; `with_tf32`)

    @property
    def shared_bandwidth(self) -> float:
        """Bytes/s all SMs' shared memory delivers without bank conflicts."""
        return self.sm_count * 32 * 4 * self.clock_hz

    @property
    def bytes_in_flight_per_sm(self) -> float:
        """Little's law: the loads an SM must keep outstanding for DRAM to
        deliver its full bandwidth (0 where the latency is not modelled)."""
        return self.memory_bandwidth * self.memory_latency / self.sm_count

    @property
    def flops_ceiling(self) -> float:
        return self.ceiling_flops or max(self.peak_flops, self.peak_tensor_flops)

    @property
    def bandwidth_ceiling(self) -> float:
        return self.ceiling_bandwidth or self.memory_bandwidth

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"

    @property
    def vector_registers(self) -> int:
        """CPU: the vector registers a kernel's register tile may fill
        (`registers_per_thread` counts their f32 lanes, `warp_size` lanes each)."""
        return self.registers_per_thread // self.warp_size

    def with_tf32(self, allowed: bool = True) -> "Hardware":
        """This hardware with f32 matmuls on TF32 tensor cores allowed (a GPU
        with a TF32 unit) or not: what `--allow-tf32` changes for the passes."""
        allowed = allowed and self.is_gpu and self.peak_tf32_flops > 0
        return self if allowed == self.tf32_matmuls else replace(self, tf32_matmuls=allowed)


H200 = Hardware(
    name="h200",
    kind="gpu",
    arch="sm_90",
    memory_bandwidth=4.8e12,
    peak_flops=67e12,
    peak_tensor_flops=989e12,
    launch_overhead=4e-6,
    registers_per_thread=255,
    registers_per_sm=65536,
    shared_memory_per_block=227 * 1024,
    shared_memory_per_sm=228 * 1024,
    max_threads_per_block=1024,
    warp_size=32,
    sm_count=132,
    max_ops_per_group=128,
    cache_bytes=50 * 1024 * 1024,
    buffer_alignment=256,
    fma_per_shared_word=4,
    ceiling_flops=989e12,  # dense bf16 tensor cores
    ceiling_bandwidth=132 * 128 * 1.98e9,  # 128 B/clock of L1 per SM at the boost clock
    peak_tf32_flops=494e12,  # dense TF32 tensor cores (half the bf16 rate)
    clock_hz=1.98e9,
    memory_latency=600e-9,  # HBM3e load-to-use latency, ~500-700 ns on Hopper microbenchmarks
)

A100 = Hardware(
    name="a100",
    kind="gpu",
    arch="sm_80",
    memory_bandwidth=2.0e12,
    peak_flops=19.5e12,
    peak_tensor_flops=312e12,
    launch_overhead=4e-6,
    registers_per_thread=255,
    registers_per_sm=65536,
    shared_memory_per_block=163 * 1024,
    shared_memory_per_sm=164 * 1024,
    max_threads_per_block=1024,
    warp_size=32,
    sm_count=108,
    max_ops_per_group=128,
    cache_bytes=40 * 1024 * 1024,
    buffer_alignment=256,
    fma_per_shared_word=2,
    ceiling_flops=312e12,
    ceiling_bandwidth=108 * 128 * 1.41e9,
    peak_tf32_flops=156e12,
    clock_hz=1.41e9,
    memory_latency=600e-9,
)

# Our CI machine: 2 cores of an AVX-512 EPYC, ~25 GB/s DRAM copy. The flop
# rate is what fusecc's generated matmul kernels reach, not the hardware's
# (OpenBLAS sgemm: ~190 GFLOP/s on 2 threads): 81-99 GFLOP/s per core for
# the transformer projections (median of 15 runs on one thread), 127-193 on
# two (benchmarks/cpu_matmul_rate.py, docs/fusion.md "Measured on the CI
# machine"), so 160. "Registers" are the 32 zmm registers of 16 floats;
# "shared memory" is the per-core L2 a tile should fit in.
CPU = Hardware(
    name="cpu",
    kind="cpu",
    arch="x86-64",
    memory_bandwidth=25e9,
    peak_flops=160e9,
    peak_tensor_flops=160e9,
    launch_overhead=5e-6,
    registers_per_thread=32 * 16,
    registers_per_sm=32 * 16,
    shared_memory_per_block=1024 * 1024,
    shared_memory_per_sm=1024 * 1024,
    max_threads_per_block=1,
    warp_size=16,
    sm_count=2,
    max_ops_per_group=128,
    cache_bytes=32 * 1024 * 1024,
    # 2 cores x 2 AVX-512 FMA pipes x 16 lanes x 2 FLOPs at 4 GHz (above any
    # turbo of the CI machines' 2.6 GHz Xeons); L1: two 64-byte loads and one
    # store per clock per core at the same 4 GHz.
    ceiling_flops=2 * 2 * 16 * 2 * 4e9,
    ceiling_bandwidth=2 * 3 * 64 * 4e9,
)

# The same machine's cores without AVX-512 (an AVX2 + FMA host: Haswell to
# Alder Lake, Zen 1-3): 16 ymm registers of 8 floats. The generated matmuls'
# rate measured on one core of the CI machine compiled for AVX2
# ($FUSECC_CPU_FEATURES=-avx512f, thread CPU time, 128×384×1536): plain
# 97 GFLOP/s against 164 with AVX-512, with bias + GELU 84 against 122, so
# 0.6 of the AVX-512 entry's rate; the FMA ceiling has half the lanes.
CPU_AVX2 = replace(
    CPU,
    peak_flops=CPU.peak_flops * 0.6,
    peak_tensor_flops=CPU.peak_tensor_flops * 0.6,
    registers_per_thread=16 * 8,
    registers_per_sm=16 * 8,
    warp_size=8,
    ceiling_flops=CPU.ceiling_flops / 2,
    ceiling_bandwidth=2 * 3 * 32 * 4e9,
)

# LLVM feature changes applied over the host's, e.g. "-avx512f" to compile
# (and run) as on an AVX2 host: what tests and benchmarks of the AVX2 path use.
CPU_FEATURES_ENV = "FUSECC_CPU_FEATURES"


@functools.lru_cache(maxsize=None)
def _detected_cpu_features() -> str:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    return llvm.get_host_cpu_features().flatten()


def host_cpu_features() -> str:
    """LLVM's `+feature,-feature,...` string for this CPU, with the changes
    of $FUSECC_CPU_FEATURES after it (LLVM lets a later entry win)."""
    detected = _detected_cpu_features()
    extra = os.environ.get(CPU_FEATURES_ENV, "").strip().strip(",")
    return f"{detected},{extra}" if extra else detected


@functools.lru_cache(maxsize=None)
def isa_of(features: str) -> frozenset[str]:
    """The extensions a feature string enables (the last `+x`/`-x` of each
    name wins); without avx512f no AVX-512 (or AVX10) extension is usable (LLVM drops
    the features that imply it)."""
    enabled: dict[str, bool] = {}
    for entry in filter(None, (f.strip() for f in features.split(","))):
        enabled[entry[1:]] = entry[0] == "+"
    isa = {name for name, on in enabled.items() if on}
    if "avx512f" not in isa:
        isa = {name for name in isa if not name.startswith(("avx512", "avx10"))}
    return frozenset(isa)


def cpu_for_isa(isa: frozenset[str]) -> Hardware:
    """The CPU entry for a host with these extensions: `CPU` (32 zmm of 16
    floats) with AVX-512, else `CPU_AVX2` (16 ymm of 8). The register tiles
    and vector chunks of the CPU templates follow its `warp_size` (lanes)
    and `vector_registers`."""
    return CPU if "avx512f" in isa else CPU_AVX2


def host_cpu() -> Hardware:
    """This host, for `--target cpu`: vector width and register count from
    the features LLVM detects (and compiles for: runtime/cpu/jit.py), so the
    same install runs AVX-512 code where there is AVX-512 and AVX2 code
    elsewhere. Without llvmlite (a CUDA-only install) the AVX-512 entry."""
    try:
        features = host_cpu_features()
    except ImportError:
        return CPU
    return cpu_for_isa(isa_of(features))


# The warp schedulers of an SM (sm_70 and later): each issues one warp
# instruction per clock (an FMA, a shared-memory load or store, a cp.async),
# so fewer resident warps leave issue slots empty, and every instruction
# that is not an FMA takes a slot an FMA then lacks.
SCHEDULERS_PER_SM = 4


def resident_blocks(hardware: Hardware, threads: int, registers: int, shared_bytes: int) -> int:
    """Blocks of this shape one SM holds at once (0: it does not fit): the
    least of what its registers (allocated per warp, rounded up to the
    allocation unit), shared memory (static + dynamic + the reserved 1 KB
    per block), threads and block slots allow."""
    warps = math.ceil(threads / hardware.warp_size)
    unit = hardware.register_allocation_unit
    per_warp = math.ceil(max(registers, 1) * hardware.warp_size / unit) * unit
    by_registers = hardware.registers_per_sm // (per_warp * warps)
    by_threads = hardware.max_threads_per_sm // (warps * hardware.warp_size)
    by_shared = hardware.shared_memory_per_sm // (shared_bytes + hardware.reserved_shared_per_block) if shared_bytes else hardware.max_blocks_per_sm
    return max(0, min(by_registers, by_threads, by_shared, hardware.max_blocks_per_sm))


def occupancy(hardware: Hardware, threads: int, registers: int, shared_bytes: int, blocks: int) -> tuple[float, float]:
    """(theoretical occupancy, waves) of a launch of `blocks` blocks:
    resident warps per SM over the most an SM holds, and the grid's blocks
    over (resident blocks per SM x SMs). (0, inf) when a block does not fit."""
    resident = resident_blocks(hardware, threads, registers, shared_bytes)
    if resident == 0:
        return 0.0, math.inf
    warps = math.ceil(threads / hardware.warp_size)
    return resident * warps / (hardware.max_threads_per_sm // hardware.warp_size), blocks / (resident * hardware.sm_count)


HARDWARE = {h.name: h for h in (H200, A100, CPU)}


def hardware(name: str) -> Hardware:
    """The entry called `name`; "cpu" is this host's (`host_cpu`)."""
    if name == CPU.name:
        return host_cpu()
    try:
        return HARDWARE[name]
    except KeyError:
        raise ValueError(f"unknown hardware '{name}'; choose one of {', '.join(HARDWARE)}") from None


def pass_hardware(p, op, context) -> Hardware:
    """The hardware a pass targets, resolved the same way in every pass: its
    `target` option, else the context's (`Pass.option`), with TF32 matmuls
    where the context allows them; an unknown name is an error located at
    `op` that names the pass."""
    from fusecc.compiler.diagnostics import error

    try:
        found = hardware(p.option("target", context))
    except ValueError as exc:
        raise error(op.location, f"pass '{p.name}': {exc}") from None
    return found.with_tf32(bool(getattr(context, "allow_tf32", False)))
