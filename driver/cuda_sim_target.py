"""`fusecc run --target cuda-sim`: the exact CUDA C and manifest that
`--target cuda` would launch, compiled by the host C++ compiler and run on
this CPU by the harness (runtime/cuda/cpu_harness). No GPU is needed, so the
generated code of a GPU can be checked anywhere; it is slow (each thread
block runs its threads in turn), meant for checking, not for speed.
"""

from __future__ import annotations

import shutil

from fusecc.compiler.diagnostics import InternalCompilerError
from fusecc.compiler.pass_manager import PassContext
from fusecc.compiler.progress import working
from fusecc.driver.cuda_level import PHASE, build_manifest
from fusecc.driver.target_base import Target
from fusecc.passes.backends.cuda.emit import EmitError

GPU_ARCH = {"h200": "sm_90", "a100": "sm_80"}


class CudaSimTarget(Target):
    name = "cuda-sim"

    def __init__(self, gpu: str = "h200", sanitize: bool = False):
        self.gpu = gpu  # the GPU the code is tuned for (fusion, tiling, manifest's arch)
        self.sanitize = sanitize  # run under the harness's sanitizer (cpu_harness/sanitizer.py)
        self.allow_tf32 = False  # f32 matmuls on TF32 tensor cores (--allow-tf32)

    def available(self) -> str | None:
        if shutil.which("c++") is None and shutil.which("g++") is None:
            return "target 'cuda-sim' compiles the CUDA C with the host C++ compiler, and none was found (install g++); use --target cpu"
        return None

    def run(self, module, entry, inputs, engine):
        return self.prepare(module, entry, engine)(inputs)

    def prepare(self, module, entry, engine):
        from fusecc.driver.cuda_target import lower_to_cuda
        from fusecc.runtime.cuda.cpu_harness import CpuModule
        from fusecc.runtime.cuda.execute import run_on_cpu

        arch = GPU_ARCH[self.gpu]
        cuda = lower_to_cuda(module, arch, PassContext(diagnostics=engine, target=self.gpu, allow_tf32=self.allow_tf32))
        try:
            manifest = build_manifest(module, cuda, "kernels.cu", arch, entry)
        except EmitError as exc:
            raise InternalCompilerError(PHASE, exc) from None
        with working(f"compiling {len(cuda.kernels)} CUDA kernels for the CPU harness (C++)"):
            CpuModule.compile(cuda.text, manifest.source, sanitize=self.sanitize)  # built now (and cached), so that run() only loads it

        def run(inputs):
            if self.sanitize:
                from fusecc.runtime.cuda.cpu_harness.sanitizer import SanitizerFindings, run_sanitized

                outputs, findings = run_sanitized(manifest, cuda.text, inputs)
                if findings:
                    raise SanitizerFindings(findings)
            else:
                outputs = run_on_cpu(manifest, cuda.text, inputs)
            return [outputs[spec.name] for spec in manifest.outputs]

        return run
