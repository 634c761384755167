"""`fusecc run --target cuda`: the program compiled to CUDA C, run on a GPU.

Without a usable GPU it says so plainly and points to `--target cpu`;
`available()` asks the driver through ctypes, so `fusecc run` without a
`--target` pays nothing for CuPy on a machine with no GPU. `lower_to_cuda`
and `compile_program` give the CUDA C and the manifest it launches: the
`cuda` level's pipeline (driver/pipelines.py), then its emitter
(driver/cuda_level.py), checked by NVRTC.
"""

from __future__ import annotations

from fusecc.compiler.diagnostics import InternalCompilerError
from fusecc.compiler.ir import Operation
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.driver.cuda_level import PHASE, build_manifest, compile_checked
from fusecc.driver.pipelines import is_loop_level, pipeline_for_level
from fusecc.driver.target_base import Target
from fusecc.passes.backends.cuda.emit import CudaSource, EmitError, emit_cuda
from fusecc.runtime.cuda.runtime import gpu_unavailable_reason

ARCH_HARDWARE = {"sm_80": "a100", "sm_90": "h200"}


def lower_to_cuda(module: Operation, arch: str = "sm_90", context=None, filename: str | None = None) -> CudaSource:
    """The CUDA C of `module` tiled for a GPU of `arch`: the CUDA pipeline
    first (fuse, tile, lower, plan) unless the module is loop IR already."""
    if not is_loop_level(module):
        target = ARCH_HARDWARE.get(arch, "h200")
        pipeline = parse_pipeline(pipeline_for_level("cuda", target=target, arch=arch))
        run_pipeline(pipeline, module, context or PassContext(target=target))
    try:
        return emit_cuda(module, filename)
    except EmitError as exc:
        raise InternalCompilerError(PHASE, exc) from None


def compile_program(module: Operation, entry: str | None = None, arch: str = "sm_90", context=None) -> tuple[str, "object"]:
    """(kernels.cu text, Manifest) of `entry` for a GPU of `arch` (see
    `lower_to_cuda`). The source is checked with NVRTC, so a rejected
    kernel is an internal error here."""
    cuda = lower_to_cuda(module, arch, context)
    try:
        manifest = build_manifest(module, cuda, "kernels.cu", arch, entry)
    except EmitError as exc:
        raise InternalCompilerError(PHASE, exc) from None
    compile_checked(cuda, manifest.source, arch)
    return cuda.text, manifest


class CudaTarget(Target):
    name = "cuda"
    allow_tf32 = False  # f32 matmuls on TF32 tensor cores (--allow-tf32)

    def available(self) -> str | None:
        reason = gpu_unavailable_reason()
        if reason is not None:
            return f"target 'cuda' cannot run here: {reason}; use --target cpu to run on the CPU"
        return None

    def run(self, module, entry, inputs, engine):
        return self.prepare(module, entry, engine)(inputs)

    def prepare(self, module, entry, engine):
        from fusecc.runtime.cuda.runtime import CudaRuntime

        runtime = CudaRuntime()
        context = PassContext(diagnostics=engine, target=ARCH_HARDWARE.get(runtime.arch, "h200"), allow_tf32=self.allow_tf32)
        source, manifest = compile_program(module, entry, runtime.arch, context)
        program = runtime.prepare(manifest, source)

        def run(inputs):
            outputs = program(inputs)
            return [outputs[spec.name] for spec in manifest.outputs]

        return run
