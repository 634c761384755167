"""The GPU side of the cost model: how long one kernel launch takes.

A kernel's time is a launch plus the slowest of three pipes, each at the
rate the launch can actually reach, not the datasheet's:

* memory: its DRAM bytes at the bandwidth its loads in flight sustain.
  Little's law: DRAM delivers `memory_bandwidth` only while
  `bandwidth x latency` bytes are outstanding; a launch keeps
  (SMs it occupies) x (warps resident on each) x 32 lanes x (bytes each
  thread has in flight) outstanding, so a launch of few blocks or few warps
  per SM is latency-bound (`GpuLaunch.bytes_in_flight_per_thread` says how
  much each template issues before it waits);
* compute: FMA-pipe flops at `peak_flops` and tensor-core flops at the peak
  of the unit used (f16/bf16 `mma`, or TF32), plus the issue slots of the
  shared-memory instructions the templates count (each scheduler issues
  one warp instruction a clock: a shared load, store or cp.async takes the
  slot of an FMA; `peak_flops` is every slot an FMA), all scaled by the fraction
  of the machine busy: the busiest SM runs ceil(blocks / SMs) blocks, so a
  grid of fewer blocks than SMs leaves SMs idle and a partial last wave
  costs a whole one, and an SM with fewer resident warps than it has warp
  schedulers leaves schedulers idle;
* shared memory: one wavefront (32 banks x 4 B) per SM per clock; the
  templates count a warp's request in the wavefronts its distinct words
  take, times its conflict ways (1: conflict-free).

A split launch (split-K, split-KV) writes partial results that a second
kernel reads back once the first has finished (stream order): the writes
are part of the first kernel's traffic, the read-back comes after it, at
the full bandwidth, never overlapped. Neither is part of the roofline
bound, which is the op's own bytes and flops.

Occupancy and waves are `hardware.occupancy`, the arithmetic the offline
counters (runtime/cuda/counters.py) report. This module depends on the
hardware description only: the fusion cost model describes each kernel's
launch and work (`cost_model.py`), this turns them into seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusecc.passes.backends.hardware import SCHEDULERS_PER_SM, Hardware, occupancy, resident_blocks



@dataclass(frozen=True)
class GpuLaunch:
    """One launch's shape and per-block resources."""

    blocks: int
    threads: int  # per block
    registers: int  # per thread
    shared_bytes: int  # per block, static + dynamic
    bytes_in_flight_per_thread: float  # global bytes a thread issues before its first use of them
    launches: int = 1  # kernels the template launches (split-KV: the partial and the combining one)


@dataclass(frozen=True)
class GpuWork:
    """What one launch does, over all its blocks."""

    dram_bytes: float
    fma_flops: float = 0.0  # on the FP32 FMA pipes
    tensor_flops: float = 0.0  # on tensor cores, at `tensor_peak`
    tensor_peak: float = 0.0  # FLOP/s of the tensor unit used (f16/bf16 or TF32)
    tensor_unit: str = "tensor"  # which: "tensor" (f16/bf16 mma) or "tf32"
    shared_requests: float = 0.0  # warp-level shared-memory loads and stores
    conflict_ways: float = 1.0  # wavefronts per request (the template's layout, or measured)
    shared_instructions: float = 0.0  # warp-level shared loads, stores and cp.async: issue slots
    partial_bytes: float = 0.0  # split launches: partial results the first kernel writes and the second reads


@dataclass(frozen=True)
class GpuTime:
    occupancy: float  # theoretical: resident warps over the most an SM holds
    waves: float  # blocks over (resident blocks per SM x SMs)
    busy_fraction: float  # of the machine's issue slots the launch keeps busy
    achieved_bandwidth: float  # bytes/s the loads in flight sustain
    memory_seconds: float
    compute_seconds: float
    shared_seconds: float
    launch_seconds: float
    combine_seconds: float = 0.0  # a split launch's second kernel, after the first (without its launch)

    @property
    def kernel_seconds(self) -> float:
        """The kernels alone, without their launches."""
        return max(self.memory_seconds, self.compute_seconds, self.shared_seconds) + self.combine_seconds

    @property
    def seconds(self) -> float:
        return self.launch_seconds + self.kernel_seconds

    @property
    def bound(self) -> str:
        """The pipe that sets the pace: memory, compute or shared."""
        pipes = {"memory": self.memory_seconds, "compute": self.compute_seconds, "shared": self.shared_seconds}
        return max(pipes, key=pipes.get)


def gpu_kernel_time(launch: GpuLaunch, work: GpuWork, hardware: Hardware) -> GpuTime:
    blocks = max(1, launch.blocks)
    occupancy_, waves = occupancy(hardware, launch.threads, launch.registers, launch.shared_bytes, blocks)
    # A block that does not fit is refused by the limit checks; time it as
    # if one fitted so that the refusal, not an infinity, explains it.
    resident = max(1, resident_blocks(hardware, launch.threads, launch.registers, launch.shared_bytes))
    warps_per_block = math.ceil(launch.threads / hardware.warp_size)
    sms = hardware.sm_count
    per_busiest_sm = math.ceil(blocks / sms)
    active_sms = min(sms, blocks)
    warps_per_sm = min(resident, per_busiest_sm) * warps_per_block
    # Work spreads over all SMs only in whole rounds of `sms` blocks.
    sm_fraction = blocks / (per_busiest_sm * sms)
    issue_fraction = min(1.0, warps_per_sm / SCHEDULERS_PER_SM)
    busy = sm_fraction * issue_fraction

    in_flight = active_sms * warps_per_sm * hardware.warp_size * launch.bytes_in_flight_per_thread
    bandwidth = hardware.memory_bandwidth
    if hardware.memory_latency > 0 and in_flight > 0:  # none in flight: an empty grid, or nothing read ahead
        bandwidth = min(bandwidth, in_flight / hardware.memory_latency)
    first_bytes = work.dram_bytes + work.partial_bytes
    memory = first_bytes / bandwidth if first_bytes else 0.0
    if first_bytes and hardware.memory_latency > 0:
        memory = max(memory, hardware.memory_latency)  # at least one round trip

    flop_seconds = work.fma_flops / hardware.peak_flops
    if work.tensor_flops:
        flop_seconds += work.tensor_flops / (work.tensor_peak or hardware.peak_tensor_flops)
    if work.shared_instructions and hardware.clock_hz:
        flop_seconds += work.shared_instructions / (SCHEDULERS_PER_SM * hardware.clock_hz * sms)
    compute = flop_seconds / busy

    shared = 0.0
    if work.shared_requests and hardware.clock_hz:
        wavefronts = work.shared_requests * max(1.0, work.conflict_ways)
        shared = wavefronts / (hardware.clock_hz * sms * sm_fraction)
    # the second kernel reads the partial results back: at least a round trip
    combine = max(work.partial_bytes / hardware.memory_bandwidth, hardware.memory_latency) if work.partial_bytes else 0.0
    return GpuTime(
        occupancy=occupancy_,
        waves=waves,
        busy_fraction=busy,
        achieved_bandwidth=bandwidth,
        memory_seconds=memory,
        compute_seconds=compute,
        shared_seconds=shared,
        launch_seconds=launch.launches * hardware.launch_overhead,
        combine_seconds=combine,
    )


def roofline_seconds(work: GpuWork, hardware: Hardware) -> float:
    """The roofline bound of `work`: its DRAM bytes at the full bandwidth or
    its flops at the peak of the unit each runs on, whichever is longer."""
    memory = work.dram_bytes / hardware.memory_bandwidth
    compute = work.fma_flops / hardware.peak_flops
    if work.tensor_flops:
        compute += work.tensor_flops / (work.tensor_peak or hardware.peak_tensor_flops)
    return max(memory, compute)
