"""`--target cpu`: compile through the loop level, then run on this CPU."""

from __future__ import annotations

from fusecc.compiler.pass_manager import PassContext, PipelineError, parse_pipeline, run_pipeline
from fusecc.passes.pipelines import pipeline_for_level
from fusecc.runtime.targets import Target


def loop_pipeline():
    return parse_pipeline(pipeline_for_level("loop", target="cpu"))


class CpuTarget(Target):
    name = "cpu"

    def available(self):
        try:
            import llvmlite.binding  # noqa: F401
        except ImportError:
            return "target 'cpu' needs llvmlite (pip install llvmlite)"
        try:
            loop_pipeline()
        except PipelineError as exc:
            return f"target 'cpu' needs the lowering to the loop level, which is not available yet ({exc}); use --target reference"
        return None

    def run(self, module, entry, inputs, engine):
        from .executor import compile_program

        run_pipeline(loop_pipeline(), module, PassContext(diagnostics=engine, target="cpu"))
        return compile_program(module).run(inputs, entry)


class LoopLevelCpuTarget(CpuTarget):
    """Runs a module that is already at the loop level (no pipeline)."""

    def available(self):
        try:
            import llvmlite.binding  # noqa: F401
        except ImportError:
            return "target 'cpu' needs llvmlite (pip install llvmlite)"
        return None

    def run(self, module, entry, inputs, engine):
        from .executor import compile_program

        return compile_program(module).run(inputs, entry)
