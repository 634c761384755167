"""The loop level as LLVM IR text, for the CPU target.

Modules are legalized first (passes/backends/legalize.py, docs/legalize.md),
so the backend makes no semantic decision: each `arith`/`math` op is one
entry of op_table.py, in the shape every backend shares
(passes/backends/table.py). The rest is the driver:

  kernel.py       one loop.kernel as one function: worker outlining, loops,
                  explicit widening of vector loops
  memory.py       buffers, loads and stores (vector, masked, gather/scatter)
  index_math.py   lane-linear index arithmetic
  analysis.py     argument aliasing/alignment, work estimates, lane analysis
  text.py         IR text builders, literals, type spellings
  math_functions.py  exp/log/tanh/erf as inline polynomial expansions

Numbers match the loop interpreter: no fast-math flags, no FMA contraction
and no reassociation (a `loop.for` accumulator stays in program order; a
vectorised reduction is written in the loop IR as per-lane partial sums).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection

from fusecc.compiler.ir import Operation
from fusecc.dialects import loop
from fusecc.passes.backends.hardware import CPU, Hardware, cpu_for_isa
from fusecc.passes.backends.legalize import legalize_kernel
from fusecc.passes.backends.llvm.analysis import argument_facts, written_arguments
from fusecc.passes.backends.llvm.kernel import KernelABI, KernelEmitter
from fusecc.passes.backends.llvm.text import ModuleBuilder

VECTORIZE_MODES = ("explicit", "llvm")


@dataclass
class LLVMProgram:
    text: str
    kernels: dict[str, KernelABI]


def emit_llvm(module: Operation, hardware: Hardware | None = None, vectorize: str = "explicit", only: Collection[str] | None = None, isa: frozenset = frozenset()) -> LLVMProgram:
    """LLVM IR for every CPU kernel of a loop-level module (or the kernels
    named in `only`, as the whole module's build has them). `isa`:
    instruction set extensions of the host (LLVM feature names, e.g.
    "avx512f") that the math expansions may use directly; without them the
    IR is portable. `hardware`: whose vector width the vector loops take;
    by default the CPU entry of `isa` (portable IR: the AVX-512 entry's
    widths, which LLVM splits where registers are narrower). Kernels are legalized in place first (a no-op on the
    pipelines' output, which `legalize` already ran on)."""
    if vectorize not in VECTORIZE_MODES:
        raise ValueError(f"vectorize must be one of {VECTORIZE_MODES}, not {vectorize!r}")
    if hardware is None:
        hardware = cpu_for_isa(frozenset(isa)) if isa else CPU
    facts = argument_facts(module)
    mb = ModuleBuilder()
    kernels = {}
    for op in module.body:
        if isinstance(op, loop.KernelOp) and (only is None or op.sym_name in only):
            legalize_kernel(op)
            emitter = KernelEmitter(mb, op, facts.get(op.sym_name), hardware, vectorize, frozenset(isa))
            kernels[op.sym_name] = emitter.emit()
    return LLVMProgram(mb.text(), kernels)


def emit_llvm_text(module: Operation, *, isa: frozenset[str] | None = None) -> str:
    """The `--emit=llvm` level: the IR that `fusecc run` compiles, for the
    `isa` extensions (default: this host's)."""
    from fusecc.passes.backends.llvm.host import host_isa

    return emit_llvm(module, isa=host_isa() if isa is None else isa).text



__all__ = ["KernelABI", "LLVMProgram", "VECTORIZE_MODES", "emit_llvm", "emit_llvm_text", "written_arguments"]
