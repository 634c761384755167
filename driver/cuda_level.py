"""The driver's `cuda` level: kernels.cu, its manifest, and NVRTC's verdict.

    fusecc model.ir -o kernels.cu [--arch sm_80|sm_90] [--resource-usage]

writes the CUDA C of every kernel (passes/backends/cuda/emit.py) and, beside it,
`kernels.json` (named after the .cu file: `model.cu` -> `model.json`): the
launch sequence of the entry schedule, each launch's grid, block, dynamic
shared memory and arguments (program inputs and outputs by name, arena
temporaries by byte offset, scalars by value, constants by name), and the
arena's size — the schema of passes/backends/cuda/manifest.py
(docs/cuda-manifest.md). A host-side `loop.copy` becomes a launch of a copy
kernel, so the runtime only launches. Constants too large to bake into the
source (weights) go to `kernels.safetensors` beside it; the runtime uploads
them once per program load.

The source goes through NVRTC's front end for `--arch` before it is written
(`-fdevice-syntax-only`: 0.13 s for the LLaMA block, whose full PTX compile
takes 2.7 s; a cubin with `--resource-usage`). NVRTC rejecting code the
emitter wrote is a bug in fusecc: an internal compiler error that names the
kernel(s) at the lines of NVRTC's errors and quotes its log.
"""

from __future__ import annotations

import os
import re

from fusecc.compiler import shape_expr
from fusecc.compiler.diagnostics import InternalCompilerError
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.types import MemRefType, index
from fusecc.dialects import loop

from fusecc.passes.backends.cuda.emit import COPY_KERNEL_BLOCK, CudaSource, EmitError, Place, buffer_places, copy_kernel_name, emit_cuda
from fusecc.passes.lowering.buffer_facts import schedule_constant

PHASE = "emit-cuda"


def dtype_name(t) -> str:
    return "i64" if t is index else t.name


def entry_schedule(module: Operation, entry: str | None = None) -> loop.ScheduleOp:
    schedules = [op for op in module.walk() if isinstance(op, loop.ScheduleOp)]
    if not schedules:
        raise EmitError("the module has no loop.schedule to launch its kernels")
    for schedule in schedules:
        if schedule.sym_name == (entry or "main"):
            return schedule
    if entry is not None:
        raise EmitError(f"no loop.schedule @{entry}")
    return schedules[0]


def constants_file(source_file: str) -> str:
    """Where the constants of `kernels.cu` go: `kernels.safetensors` beside it."""
    return os.path.splitext(os.path.basename(source_file))[0] + ".safetensors"


def build_manifest(module: Operation, cuda: CudaSource, source_file: str = "kernels.cu", arch: str | None = None, entry: str | None = None):
    """The launch manifest of `module`'s entry schedule for the emitted `cuda`;
    its constants carry their values (`data`) for `constants_bytes`."""
    from fusecc.passes.backends.cuda.manifest import ArenaArg, ConstantArg, ConstantSpec, Launch, Manifest, ScalarArg, SizeArg, TensorArg, TensorSpec
    from fusecc.passes.backends.cuda.manifest_dims import in_dims

    schedule = entry_schedule(module, entry)
    places = buffer_places(schedule)
    names = list(schedule.inputs) + list(schedule.outputs)
    shapes = schedule_shapes(schedule)

    def spec(arg: Value, name: str) -> TensorSpec:
        return TensorSpec(name, shapes[arg], dtype_name(arg.type.element_type))

    used: dict[str, ConstantSpec] = {}

    def argument(value: Value, where: str):
        constant = schedule_constant(value)
        if constant is not None and constant in cuda.constants:
            name = cuda.constants[constant]
            if name not in used:
                t = constant.result.type
                used[name] = ConstantSpec(name, t.shape, dtype_name(t.element_type), constants_file(source_file), name, constant.attr("value").array)
            return ConstantArg(name)
        if not isinstance(value.type, MemRefType):
            op = value.defining_op
            if op is None or op.name != "arith.constant":
                raise EmitError(f"{where}: a scalar argument must be a constant of the schedule")
            raw = op.attr("value").value
            return ScalarArg(bool(raw) if value.type.name == "i1" else raw, dtype_name(value.type))
        place: Place | None = places.get(value)
        if place is None:
            raise EmitError(f"{where}: a buffer that is neither an input, an output nor in the arena")
        if place.buffer == "arena":
            offset = place.offset if type(place.offset) is int else in_dims(place.offset, {})  # the plan's expression, simplified
            return ArenaArg(offset, shapes[value], dtype_name(value.type.element_type))
        if place.offset:
            raise EmitError(f"{where}: a view at byte {place.offset} of {place.buffer} '{names[place.index + (len(schedule.inputs) if place.buffer == 'output' else 0)]}' (kernels.json passes whole inputs and outputs)")
        name = (schedule.inputs if place.buffer == "input" else schedule.outputs)[place.index]
        return TensorArg(place.buffer, name)

    by_symbol = {k.sym_name: k for k in cuda.kernels if k.sym_name}
    launches = []
    for op in schedule.body:
        if isinstance(op, loop.LaunchOp):
            info = by_symbol[op.kernel_name]
            if 0 in info.grid or 0 in info.block:
                continue  # an empty iteration space: nothing to run
            args = [argument(v, f"launch of @{op.kernel_name}, argument {i}") for i, v in enumerate(op.operands) if i not in info.baked_args]
            # `?` sizes: the kernel's size parameters, and its grid, as expressions of the dims
            args += [SizeArg(str(shapes[op.operands[i]][axis])) for i, axis in info.size_args]
            sizes = {f"a{i}_{axis}": size for i, v in enumerate(op.operands) if v in shapes for axis, size in enumerate(shapes[v])}
            grid = tuple(in_dims(g, sizes) if isinstance(g, str) else g for g in info.grid)
            launches.append(Launch(info.name, grid, info.block, args, info.dynamic_shared_bytes, info.static_shared_bytes))
        elif isinstance(op, loop.CopyOp) and op in cuda.fills:
            fill = cuda.kernel(cuda.fills[op])
            if op.target.type.num_elements:
                launches.append(Launch(fill.name, fill.grid, fill.block, [argument(op.target, "loop.copy target")]))
        elif isinstance(op, loop.CopyOp):
            count = shape_expr.product(shapes[op.source])
            if op.source.type.element_type is not op.target.type.element_type:
                raise EmitError(f"a loop.copy from {op.source.type} to {op.target.type} changes the element type")
            if count == "0":
                continue
            source, target = argument(op.source, "loop.copy source"), argument(op.target, "loop.copy target")
            size = int(count) if count.isdigit() else None
            blocks = -(-size // COPY_KERNEL_BLOCK) if size is not None else in_dims(f"({count} + {COPY_KERNEL_BLOCK - 1})//{COPY_KERNEL_BLOCK}", {})
            launches.append(Launch(copy_kernel_name(op.source.type.element_type), (blocks, 1, 1), (COPY_KERNEL_BLOCK, 1, 1), [source, target, ScalarArg(size, "i64") if size is not None else SizeArg(count)]))
    return Manifest(
        source=source_file,
        inputs=[spec(a, n) for a, n in zip(schedule.input_args, schedule.inputs)],
        outputs=[spec(a, n) for a, n in zip(schedule.output_args, schedule.outputs)],
        launches=launches,
        constants=list(used.values()),
        arena_bytes=schedule.arena_size if type(schedule.arena_size) is int else in_dims(schedule.arena_size, {}),
        entry=schedule.sym_name,
        arch=arch,
        checks=[tuple(str(e.value) for e in check.elements) for check in getattr(schedule.attributes.get("dim_checks"), "elements", ())],
    )


def schedule_shapes(schedule: loop.ScheduleOp) -> dict[Value, tuple]:
    """The shape of each buffer of the schedule: ints, and a `?` axis as the
    expression of the dims the schedule gives it (`arg_sizes`, a view's `sizes`)."""
    def shape(t, sizes) -> tuple:
        if not isinstance(t, MemRefType):
            return ()
        given = dict(zip(t.dynamic_axes, sizes or ()))
        return tuple(d if type(d) is int else in_dims(given[axis], {}) for axis, d in enumerate(t.shape))

    from fusecc.passes.backends.cuda.manifest_dims import in_dims

    shapes = {arg: shape(arg.type, sizes) for arg, sizes in zip(schedule.body.args, schedule.argument_sizes())}
    for op in schedule.body:
        for result in op.results:
            shapes[result] = shape(result.type, op.attr("sizes") if isinstance(op, (loop.ArenaViewOp, loop.ViewOp)) else ())
    return shapes


# --------------------------------------------------------------------------- NVRTC

def blame(cuda: CudaSource, filename: str, log: str) -> list[str]:
    """The kernels whose lines NVRTC's errors in `filename` point at."""
    names = []
    errors = re.finditer(rf"^{re.escape(filename)}\((\d+)\): (?:catastrophic )?error", log, re.M)
    for line in (int(m.group(1)) for m in errors):
        kernel = cuda.kernel_at_line(line)
        name = kernel.name if kernel else f"the preamble (line {line})"
        if name not in names:
            names.append(name)
    return names


class GeneratedCodeRejected(Exception):
    """NVRTC rejected the emitted CUDA C."""


def compile_checked(cuda: CudaSource, filename: str, arch: str, resource_usage: bool = False):
    """Check the emitted source with NVRTC's front end (or compile a cubin
    for ptxas's report); None when NVRTC is not installed and no report was
    asked for."""
    try:
        from fusecc.runtime.cuda.nvrtc import NvrtcError, NvrtcOptions, NvrtcUnavailable, compile_cuda, nvrtc_version
        from fusecc.runtime.cuda.resources import resource_usage as usage_of

        nvrtc_version()
    except (ImportError, NvrtcUnavailable) as exc:
        if resource_usage:
            from fusecc.compiler.diagnostics import UsageError

            raise UsageError(f"--resource-usage needs NVRTC: {exc}") from None
        return None
    try:
        if resource_usage:
            return usage_of(cuda.text, filename, arch)
        return compile_cuda(cuda.text, filename, arch=arch, output="ptx", options=NvrtcOptions(syntax_only=True))
    except NvrtcError as exc:
        kernels = blame(cuda, filename, exc.log)
        where = f"{PHASE} (kernel{'s' * (len(kernels) != 1)} {', '.join(kernels)})" if kernels else PHASE
        raise InternalCompilerError(where, GeneratedCodeRejected(f"NVRTC rejected the generated CUDA C for {arch}:\n{exc.log}")) from None


# --------------------------------------------------------------------------- the driver hook


def constants_bytes(manifest) -> bytes:
    """The manifest's constants as the safetensors file it names."""
    from fusecc.compiler.resources import safetensors_bytes
    from fusecc.compiler.types import SCALAR_TYPES

    return safetensors_bytes({c.tensor: (c.data, SCALAR_TYPES[c.dtype]) for c in manifest.constants})


def cuda_level_outputs(module: Operation, *, arch: str = "sm_90", output: str | None = None, source_name: str | None = None, resource_usage: bool = False) -> tuple[str, dict[str, str | bytes], str]:
    """`fusecc ... [-o kernels.cu]`: (the source, {path: content} of the
    manifest and the constants file beside -o, the resource usage as notes
    when asked); the tools write all three. Without -o there is no manifest
    and no constants file: the source's note says so."""
    filename = os.path.basename(output) if output not in (None, "-") else "kernels.cu"
    try:
        cuda = emit_cuda(module, source_name)
        manifest = build_manifest(module, cuda, filename, arch) if output not in (None, "-") else None
    except EmitError as exc:
        raise InternalCompilerError(PHASE, exc) from None
    checked = compile_checked(cuda, filename, arch, resource_usage=resource_usage)
    notes = ""
    if resource_usage:
        from fusecc.runtime.cuda.resources import format_resource_usage

        notes = format_resource_usage(checked, {k.name: k.estimate for k in cuda.kernels if k.estimate})
    if manifest is None:
        from fusecc.passes.backends.cuda.emit import MANIFEST_NOTE, NO_MANIFEST_NOTE

        return cuda.text.replace(MANIFEST_NOTE, NO_MANIFEST_NOTE, 1), {}, notes
    beside: dict[str, str | bytes] = {os.path.splitext(output)[0] + ".json": manifest.to_json()}
    if manifest.constants:
        beside[os.path.join(os.path.dirname(output), manifest.constants[0].file)] = constants_bytes(manifest)
    return cuda.text, beside, notes
