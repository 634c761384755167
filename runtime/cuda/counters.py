"""Offline performance counters per kernel, in the spirit of Nsight Compute,
computed without a GPU (`fusecc report model.ir --counters`).

- shared_bank_conflict_ways: shared-memory wavefronts over the ideal ones,
  summed over warp requests (1.0: conflict-free; 32: every lane in one
  bank). A request is the k-th execution of one load or store by the lanes
  of a warp; its wavefronts are the most distinct 32-bit words any of the 32
  banks must serve, the ideal is its distinct words / 32.
- shared_wavefronts_per_block: the wavefronts (each up to one 4-byte word
  per bank) a sampled block's warp requests take, what the cost model's
  shared-memory pipe counts (passes/fusion/gpu_kernels.py); a cp.async is
  one store, where it is issued.
- global_sector_efficiency: bytes the warp requests ask for over the bytes
  of the 32-byte sectors they touch (1.0: perfectly coalesced).
  Both come from the actual address stream of the exact kernels.cu on the
  CPU harness (its sanitizer build records every access), over the first
  SAMPLE_BLOCKS blocks of each launch.
- registers, spills: ptxas's report (NVRTC, for --arch).
- theoretical_occupancy: resident warps per SM over the most an SM holds,
  limited by registers (allocated per warp in units of 256), shared memory
  (static + dynamic + 1 KB reserved per block), threads and blocks per SM;
  waves: the grid's blocks over (resident blocks per SM x SMs). Both are
  `passes/backends/hardware.occupancy`, the arithmetic the cost model uses.
"""

from __future__ import annotations

import ctypes
import math
import os
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from fusecc.passes.backends.hardware import Hardware, occupancy

SAMPLE_BLOCKS = 2


class _Counters(ctypes.Structure):  # cuda_cpu_sanitizer.h's san::Counters
    _fields_ = [
        ("shared_requests", ctypes.c_uint64),
        ("shared_wavefronts", ctypes.c_uint64),
        ("shared_ideal_wavefronts", ctypes.c_uint64),
        ("global_requests", ctypes.c_uint64),
        ("global_requested_bytes", ctypes.c_uint64),
        ("global_sector_bytes", ctypes.c_uint64),
        ("sample_blocks", ctypes.c_int64),
        ("truncated", ctypes.c_int64),
    ]


@dataclass(frozen=True)
class KernelCounters:
    name: str
    launches: int
    grid_blocks: int
    threads_per_block: int
    shared_bytes: int  # static + dynamic, per block
    shared_requests: int
    shared_bank_conflict_ways: float | None  # None: no shared-memory access
    shared_wavefronts_per_block: float
    global_requests: int
    global_sector_efficiency: float | None
    registers: int | None  # None: NVRTC not available
    spills: int | None  # bytes spilled (stores + loads), ptxas
    theoretical_occupancy: float | None
    waves: float | None

    def to_dict(self) -> dict:
        return asdict(self)


def measure_access_streams(manifest, source: str, inputs: Mapping[str, Any] | Sequence[Any], *, cache_dir: str | os.PathLike | None = None) -> dict[str, _Counters]:
    """Per kernel, the harness's counts over the sampled blocks of its launches."""
    from fusecc.runtime.cuda.cpu_harness.loader import CpuModule
    from fusecc.runtime.cuda.cpu_harness.sanitizer import library_ranges
    from fusecc.runtime.cuda.execute import Bound, constant_values, gather_inputs, plan_memory, to_device_layout

    host = gather_inputs(manifest, inputs)
    module = CpuModule.compile(source, manifest.source, cache_dir=cache_dir, sanitize=True)
    total = plan_memory(manifest).total_bytes
    raw = np.zeros(total + 256, dtype=np.uint8)  # 256-byte aligned like cudaMalloc's: sectors fall where a GPU's would
    start = -raw.ctypes.data % 256
    bound = Bound(manifest, raw[start : start + total], constant_values(manifest))
    for spec in manifest.inputs:
        bound.tensors[spec.name][...] = to_device_layout(host[spec.name], spec.dtype)
    from fusecc.runtime.cuda.cpu_harness.sanitizer import BUFFER, IGNORED, _new_report, _Region

    totals: dict[str, _Counters] = {}
    for launch in manifest.launches:
        args = bound.args(launch)
        rows = [(a.ctypes.data, a.ctypes.data + a.nbytes, BUFFER, i) for i, a in enumerate(args) if isinstance(a, np.ndarray)]
        rows += [(start, end, IGNORED, -1) for start, end in library_ranges(module.library)]
        regions = (_Region * len(rows))(*[_Region(*r) for r in rows])
        report, _storage = _new_report()
        counters = _Counters(sample_blocks=SAMPLE_BLOCKS)
        module.launch(launch.kernel, launch.grid, launch.block, args, launch.shared_bytes, workers=1, regions=regions, report=report, counters=counters, block_limit=SAMPLE_BLOCKS)
        total = totals.setdefault(launch.kernel, _Counters())
        for name, _ in _Counters._fields_:
            setattr(total, name, getattr(total, name) + getattr(counters, name))
    return totals


def kernel_counters(cuda, manifest, inputs, hardware: Hardware, *, cache_dir: str | os.PathLike | None = None) -> list[KernelCounters]:
    """The counters of every kernel the manifest launches (`cuda`: the emitter's CudaSource)."""
    from fusecc.runtime.cuda.nvrtc import NvrtcUnavailable
    from fusecc.runtime.cuda.resources import resource_usage

    streams = measure_access_streams(manifest, cuda.text, inputs, cache_dir=cache_dir)
    try:
        usage = resource_usage(cuda.text, manifest.source, hardware.arch)
    except NvrtcUnavailable:
        usage = {}
    info = {k.name: k for k in cuda.kernels}
    rows = []
    for name, counts in streams.items():
        launches = [launch for launch in manifest.launches if launch.kernel == name]
        first = launches[0]
        threads = math.prod(first.block)
        kernel = info.get(name)
        shared = (kernel.static_shared_bytes if kernel else 0) + first.shared_bytes
        blocks = max(math.prod(launch.grid) for launch in launches)
        used = usage.get(name)
        occupancy_, waves = occupancy(hardware, threads, used.registers, shared, blocks) if used else (None, None)
        rows.append(
            KernelCounters(
                name=name,
                launches=len(launches),
                grid_blocks=blocks,
                threads_per_block=threads,
                shared_bytes=shared,
                shared_requests=counts.shared_requests,
                shared_bank_conflict_ways=counts.shared_wavefronts / counts.shared_ideal_wavefronts if counts.shared_ideal_wavefronts else None,
                shared_wavefronts_per_block=counts.shared_wavefronts / max(1, sum(min(SAMPLE_BLOCKS, math.prod(launch.grid)) for launch in launches)),
                global_requests=counts.global_requests,
                global_sector_efficiency=counts.global_requested_bytes / counts.global_sector_bytes if counts.global_sector_bytes else None,
                registers=used.registers if used else None,
                spills=(used.spill_store_bytes + used.spill_load_bytes) if used else None,
                theoretical_occupancy=occupancy_,
                waves=waves,
            )
        )
    return rows


def format_counters(rows: list[KernelCounters], hardware: Hardware) -> str:
    def number(value, spec):
        return "n/a" if value is None else format(value, spec)

    lines = [
        f"offline counters for {hardware.name} ({hardware.arch}, {hardware.sm_count} SMs): the first {SAMPLE_BLOCKS} blocks of each launch on the CPU harness; registers from ptxas",
        f"{'kernel':<32} {'blocks':>7} {'thr':>5} {'smem B':>7} {'bank ways':>9} {'sector eff':>10} {'regs':>5} {'spills':>6} {'occupancy':>9} {'waves':>6}",
    ]
    for r in rows:
        lines.append(
            f"{r.name:<32} {r.grid_blocks:>7} {r.threads_per_block:>5} {r.shared_bytes:>7} {number(r.shared_bank_conflict_ways, '.2f'):>9} "
            f"{number(r.global_sector_efficiency, '.2f'):>10} {number(r.registers, 'd'):>5} {number(r.spills, 'd'):>6} "
            f"{number(r.theoretical_occupancy, '.0%'):>9} {number(r.waves, '.2f'):>6}"
        )
    return "\n".join(lines) + "\n"
