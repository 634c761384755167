"""`--target cpu`: compile through the loop level, then run on this CPU."""

from __future__ import annotations

import importlib.util

from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.driver.pipelines import pipeline_for_level
from fusecc.driver.target_base import Target

NO_LLVMLITE = "target 'cpu' needs llvmlite (pip install llvmlite)"


def loop_pipeline():
    return parse_pipeline(pipeline_for_level("loop", target="cpu"))


class CpuTarget(Target):
    name = "cpu"
    lowers = True  # runs the loop-level pipeline first; a module already at the loop level does not

    def available(self):
        return NO_LLVMLITE if importlib.util.find_spec("llvmlite") is None else None

    def run(self, module, entry, inputs, engine):
        return self.prepare(module, entry, engine)(inputs)

    def prepare(self, module, entry, engine):
        from fusecc.runtime.cpu.executor import compile_program

        if self.lowers:
            run_pipeline(loop_pipeline(), module, PassContext(diagnostics=engine, target="cpu"))
        program = compile_program(module)
        return lambda inputs: program.run(inputs, entry)


class LoopLevelCpuTarget(CpuTarget):
    """Runs a module that is already at the loop level (no pipeline)."""

    lowers = False
