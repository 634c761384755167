"""`fusecc run --target cuda`: the program compiled to CUDA C, run on a GPU.

Without a usable GPU it says so plainly and points to `--target cpu`;
`available()` asks the driver through ctypes, so `fusecc run` without a
`--target` pays nothing for CuPy on a machine with no GPU.
"""

from __future__ import annotations

from fusecc.driver.targets import Target

from fusecc.runtime.cuda.runtime import gpu_unavailable_reason


class CudaTarget(Target):
    name = "cuda"

    def available(self) -> str | None:
        reason = gpu_unavailable_reason()
        if reason is not None:
            return f"target 'cuda' cannot run here: {reason}; use --target cpu to run on the CPU"
        return None

    def run(self, module, entry, inputs, engine):
        return self.prepare(module, entry, engine)(inputs)

    def prepare(self, module, entry, engine):
        from fusecc.compiler.pass_manager import PassContext
        from fusecc.driver.cuda_level import ARCH_HARDWARE, compile_program

        from fusecc.runtime.cuda.runtime import CudaRuntime

        runtime = CudaRuntime()
        context = PassContext(diagnostics=engine, target=ARCH_HARDWARE.get(runtime.arch, "h200"))
        source, manifest = compile_program(module, entry, runtime.arch, context)
        program = runtime.prepare(manifest, source)

        def run(inputs):
            outputs = program(inputs)
            return [outputs[spec.name] for spec in manifest.outputs]

        return run
