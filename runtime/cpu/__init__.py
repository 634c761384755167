"""The CPU target: loop-level kernels compiled to LLVM IR (passes/backends/llvm/emit.py),
JIT-compiled for this machine (jit.py) and run over all cores (executor.py).
See docs/cpu-target.md."""

from fusecc.runtime.cpu.executor import CompiledProgram, WorkerPool, compile_program, split_range

__all__ = ["CompiledProgram", "WorkerPool", "compile_program", "split_range"]
