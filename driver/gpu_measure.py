"""Timing each launch of GPU code, for `fusecc profile --target cuda|cuda-sim`.

Both compile a loop-level module (GPU-mapped, tuned for `gpu`) to the CUDA C
and manifest that `fusecc run --target cuda` launches, and return a
`measurers.Runnable` whose `run(..., profile=[])` appends (step name, seconds)
per launch, in schedule order (a `loop.copy` is a copy kernel's launch):

* `CudaEventsMeasurer`: on the GPU, a pair of CUDA events around each
  launch on the runtime's stream, read after the stream synchronises (the
  host's clock would time the enqueue, not the kernel);
* `CudaSimMeasurer`: the same launches on this CPU through the harness
  (runtime/cuda/cpu_harness), timed by the wall clock around each. These
  are the harness's times, not a GPU's: useful to find a kernel that is
  far off, not to tune.
"""

from __future__ import annotations

import time

import numpy as np

from fusecc.compiler.ir import Operation
from fusecc.driver.measured_variants import schedule_steps

GPU_ARCH = {"h200": "sm_90", "a100": "sm_80"}


def _emit(module: Operation, gpu: str):
    """(CUDA source, manifest, step names) of a loop-level module's entry schedule."""
    from fusecc.dialects import loop
    from fusecc.driver.cuda_level import build_manifest
    from fusecc.driver.cuda_target import lower_to_cuda

    arch = GPU_ARCH[gpu]
    cuda = lower_to_cuda(module, arch)
    manifest = build_manifest(module, cuda, "kernels.cu", arch)
    schedule = next(op for op in module.body if isinstance(op, loop.ScheduleOp))
    names = [step.name for step in schedule_steps(schedule)]
    if len(names) != len(manifest.launches):
        raise RuntimeError(f"the manifest has {len(manifest.launches)} launches for {len(names)} schedule steps")
    return cuda, manifest, names


class _GpuRunnable:
    def __init__(self, program, names: list[str]):
        self.program, self.names = program, names

    def run(self, inputs, entry=None, profile: list | None = None) -> list[np.ndarray]:
        program = self.program
        program.set_inputs(inputs)
        if profile is None:
            program.launch()
        else:
            cp = program.runtime.cp
            events = []
            with program.runtime.device, program.runtime.stream:
                for launch, args in zip(program.manifest.launches, program.args):
                    start, end = cp.cuda.Event(), cp.cuda.Event()
                    start.record()
                    program.kernels[launch.kernel](launch.grid, launch.block, args, shared_mem=launch.shared_bytes)
                    end.record()
                    events.append((start, end))
            program.synchronize()
            profile.extend((name, cp.cuda.get_elapsed_time(s, e) / 1e3) for name, (s, e) in zip(self.names, events))
        outputs = program.outputs()
        return [outputs[spec.name] for spec in program.manifest.outputs]


class CudaEventsMeasurer:
    def __init__(self, gpu: str = "h200"):
        self.target = gpu

    def available(self) -> str | None:
        from fusecc.runtime.cuda.runtime import gpu_unavailable_reason

        return gpu_unavailable_reason()

    def compile(self, module: Operation):
        from fusecc.runtime.cuda.runtime import CudaRuntime

        cuda, manifest, names = _emit(module, self.target)
        return _GpuRunnable(CudaRuntime().prepare(manifest, cuda.text), names)

    def describe(self) -> str:
        return f"the GPU (CUDA events; code tuned for {self.target})"


class _SimRunnable:
    def __init__(self, cpu_module, manifest, names: list[str]):
        self.module, self.manifest, self.names = cpu_module, manifest, names

    def run(self, inputs, entry=None, profile: list | None = None) -> list[np.ndarray]:
        from fusecc.runtime.cuda.execute import Bound, constant_values, for_call, from_device_layout, gather_inputs, plan_memory, to_device_layout

        manifest = for_call(self.manifest, inputs)  # a manifest with `?` dims, at the dims of these inputs
        host = gather_inputs(manifest, inputs)
        bound = Bound(manifest, np.zeros(plan_memory(manifest).total_bytes, dtype=np.uint8), constant_values(manifest))
        for spec in manifest.inputs:
            bound.tensors[spec.name][...] = to_device_layout(host[spec.name], spec.dtype)
        for name, launch in zip(self.names, manifest.launches):
            start = time.perf_counter()
            self.module.launch(launch.kernel, launch.grid, launch.block, bound.args(launch), launch.shared_bytes, None)
            if profile is not None:
                profile.append((name, time.perf_counter() - start))
        return [from_device_layout(bound.tensors[spec.name].copy(), spec.dtype) for spec in manifest.outputs]


class CudaSimMeasurer:
    def __init__(self, gpu: str = "h200"):
        self.target = gpu

    def available(self) -> str | None:
        from fusecc.driver.cuda_sim_target import CudaSimTarget

        return CudaSimTarget(self.target).available()

    def compile(self, module: Operation):
        from fusecc.runtime.cuda.cpu_harness import CpuModule

        cuda, manifest, names = _emit(module, self.target)
        return _SimRunnable(CpuModule.compile(cuda.text, manifest.source), manifest, names)

    def describe(self) -> str:
        return f"this CPU running the CUDA C of {self.target} through the harness (not a GPU's times)"


def measurer_for(target: str, gpu: str | None, threads: int | None = None):
    """The measurer of a `--target` (cpu, cuda, cuda-sim), or raise
    measurers.MeasurementUnavailable saying why it cannot run here."""
    from fusecc.driver import measurers

    if target == "cpu":
        return measurers.measurer_for("cpu", threads)
    factory = {"cuda": CudaEventsMeasurer, "cuda-sim": CudaSimMeasurer}.get(target)
    if factory is None:
        raise measurers.MeasurementUnavailable(f"fusecc profile runs on cpu, cuda or cuda-sim, not '{target}'")
    measurer = factory(gpu or "h200")
    problem = measurer.available()
    if problem:
        raise measurers.MeasurementUnavailable(problem)
    return measurer


__all__ = ["CudaEventsMeasurer", "CudaSimMeasurer", "measurer_for"]
