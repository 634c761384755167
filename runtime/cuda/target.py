"""`fusecc run --target cuda`: the program compiled to CUDA C, run on a GPU.

Without a usable GPU it says so plainly and points to `--target cpu`;
`available()` asks the driver through ctypes, so `fusecc run` without a
`--target` pays nothing for CuPy on a machine with no GPU.
"""

from __future__ import annotations

from fusecc.runtime.targets import Target, TargetUnavailable

from .runtime import gpu_unavailable_reason


class CudaTarget(Target):
    name = "cuda"

    def available(self) -> str | None:
        reason = gpu_unavailable_reason()
        if reason is not None:
            return f"target 'cuda' cannot run here: {reason}; use --target cpu to run on the CPU"
        from fusecc.passes.pipelines import EMIT_LEVELS

        if EMIT_LEVELS["cuda"].emitter is None:
            return "target 'cuda': the CUDA C emitter has not landed yet; use --target cpu (or --target reference)"
        return None

    def run(self, module, entry, inputs, engine):
        # Reached only once available() passes, i.e. once the emitter exists:
        # it will produce (kernels.cu, Manifest) for `entry`, and
        # CudaRuntime().run(manifest, source, inputs) executes them.
        raise TargetUnavailable(self.available() or "target 'cuda': running emitted kernels is not wired up yet")
