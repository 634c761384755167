"""`share-kernels`: identical kernels become one, launched wherever each was.

Layers of a model lower to kernels that differ only in their names and
fusion group ids (`fused_0_matmul` and `fused_7_matmul` of an encoder's two
layers). This pass keeps the first kernel of each body and points every
`loop.launch` of the others at it, so that the CPU compiles one LLVM
function and kernels.cu holds one CUDA function per distinct body: compile
time grows with the distinct kernels, not with the layers.

Two kernels are identical when their bodies are, op by op (operands as
numbers in order of definition, attributes bit for bit: 0.0 and -0.0
differ), and so are their attributes apart from the symbol and `group`. Backends that specialise a
kernel on its launches (the LLVM emitter's alias and alignment facts)
already merge the facts of all launches of one kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusecc.compiler import attributes as A
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.pass_manager import Pass, PassContext
from fusecc.dialects import loop
from fusecc.passes.transforms.cse import attribute_key

# Attributes that name a kernel's origin, not what it computes.
IDENTITY_ATTRIBUTES = ("sym_name", "group")


def structural_key(op: Operation, ignored: tuple[str, ...] = IDENTITY_ATTRIBUTES) -> tuple:
    """`op`'s structure without the `ignored` attributes: its attributes
    (floats and dense elements bit for bit: 0.0 and -0.0 differ), and its
    regions op by op, operands as numbers in order of definition, so equal
    bodies give equal keys; a value from outside `op` stands for itself."""
    numbers: dict[Value, int] = {}

    def region_key(region) -> tuple:
        blocks = []
        for block in region.blocks:
            for arg in block.args:
                numbers[arg] = len(numbers)
            ops = []
            for inner in block:
                ops.append((inner.name, tuple(numbers.get(v, v) for v in inner.operands), attribute_key(inner.attributes),
                            tuple(inner.result_types), tuple(region_key(r) for r in inner.regions)))
                for result in inner.results:
                    numbers[result] = len(numbers)
            blocks.append((tuple(a.type for a in block.args), tuple(ops)))
        return tuple(blocks)

    own = {name: value for name, value in op.attributes.items() if name not in ignored}
    return (op.name, tuple(v.type for v in op.operands), tuple(op.result_types), attribute_key(own), tuple(region_key(r) for r in op.regions))


def body_key(kernel: loop.KernelOp) -> tuple:
    return structural_key(kernel)


def share_identical_kernels(module: Operation) -> dict[str, str]:
    """Merge identical `loop.kernel`s of `module`; returns {removed: kept}."""
    kept_by_key: dict[tuple, str] = {}
    replaced: dict[str, str] = {}
    for kernel in [op for op in module.body if isinstance(op, loop.KernelOp)]:
        key = body_key(kernel)
        kept = kept_by_key.setdefault(key, kernel.sym_name)
        if kept != kernel.sym_name:
            replaced[kernel.sym_name] = kept
    if not replaced:
        return replaced
    groups = {op.sym_name: op.attributes.get("group") for op in module.body if isinstance(op, loop.KernelOp)}
    for op in module.walk():
        if isinstance(op, loop.LaunchOp) and op.kernel_name in replaced:
            group = groups[op.kernel_name]
            if "group" not in op.attributes and group is not None and group != groups[replaced[op.kernel_name]]:  # the group it computes stays said
                op.attributes["group"] = group
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
