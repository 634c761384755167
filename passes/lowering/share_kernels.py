"""`share-kernels`: identical kernels become one, launched wherever each was.

Layers of a model lower to kernels that differ only in their names and
fusion group ids (`fused_0_matmul` and `fused_7_matmul` of an encoder's two
layers). This pass keeps the first kernel of each body and points every
`loop.launch` of the others at it, so that the CPU compiles one LLVM
function and kernels.cu holds one CUDA function per distinct body: compile
time grows with the distinct kernels, not with the layers.

Two kernels are identical when their printed forms are, apart from the
symbol and the `group` attribute (values are numbered from zero inside
each kernel, so equal bodies print equally). Backends that specialise a
kernel on its launches (the LLVM emitter's alias and alignment facts)
already merge the facts of all launches of one kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusecc.compiler import attributes as A
from fusecc.compiler.ir import Operation
from fusecc.compiler.pass_manager import Pass, PassContext
from fusecc.compiler.printer import print_op
from fusecc.dialects import loop

# Attributes that name a kernel's origin, not what it computes.
IDENTITY_ATTRIBUTES = ("sym_name", "group")


def body_key(kernel: loop.KernelOp) -> str:
    """The kernel's text without the attributes that only identify it."""
    original = dict(kernel.attributes)
    for name in IDENTITY_ATTRIBUTES:
        kernel.attributes.pop(name, None)
    try:
        return print_op(kernel)
    finally:
        kernel.attributes.clear()
        kernel.attributes.update(original)  # in its order: the printer keeps it


def share_identical_kernels(module: Operation) -> dict[str, str]:
    """Merge identical `loop.kernel`s of `module`; returns {removed: kept}."""
    kept_by_key: dict[str, str] = {}
    replaced: dict[str, str] = {}
    for kernel in [op for op in module.body if isinstance(op, loop.KernelOp)]:
        key = body_key(kernel)
        kept = kept_by_key.setdefault(key, kernel.sym_name)
        if kept != kernel.sym_name:
            replaced[kernel.sym_name] = kept
    if not replaced:
        return replaced
    for op in module.walk():
        if isinstance(op, loop.LaunchOp) and op.kernel_name in replaced:
            op.attributes["kernel"] = A.SymbolRefAttr(replaced[op.kernel_name])
    for kernel in [op for op in module.body if isinstance(op, loop.KernelOp) and op.sym_name in replaced]:
        kernel.erase()
    return replaced


@dataclass(frozen=True)
class ShareKernels(Pass):
    """One kernel per distinct body."""

    name = "share-kernels"
    summary = "Launch one kernel wherever an identical one was launched (identical layers compile once)"
    anchor = "builtin.module"

    def run(self, module: Operation, context: PassContext) -> None:
        replaced = share_identical_kernels(module)
        context.statistics["share-kernels.removed"] = context.statistics.get("share-kernels.removed", 0) + len(replaced)
