"""Run a (manifest, CUDA C source, inputs) triple: on the CPU harness here,
on a GPU through runtime.py; both share the memory plan and argument binding.

Device memory is one allocation: the arena of temporaries at offset 0 (the
manifest's arena offsets are relative to it), then every input, then every
output, then every constant, each at a 256-byte aligned offset. Constants
are written once when a program is loaded: from the manifest's in-memory
values when it was built in this process, else from the safetensors file it
names beside it (`folder`). Values cross between numpy and
the device layout here: bf16 travels as its uint16 bit pattern (the host
holds bf16 values widened to float32, see compiler/types.py), i1 as one
byte per element.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from fusecc.passes.backends.cuda.manifest import ArenaArg, ConstantArg, Launch, Manifest, ScalarArg, SizeArg, TensorArg

ALIGNMENT = 256

_STORAGE = {
    "f64": np.float64,
    "f32": np.float32,
    "f16": np.float16,
    "bf16": np.uint16,
    "i64": np.int64,
    "i32": np.int32,
    "i8": np.int8,
    "i1": np.bool_,
}


class ExecutionError(ValueError):
    """The inputs do not fit the manifest (missing, wrong shape)."""


def storage_dtype(dtype: str) -> np.dtype:
    return np.dtype(_STORAGE[dtype])


def to_device_layout(array: Any, dtype: str) -> np.ndarray:
    """A host value as the contiguous array the kernels read."""
    if dtype == "bf16":
        from fusecc.runtime.cuda.cpu_harness.loader import bf16_bits

        return np.ascontiguousarray(bf16_bits(array))
    return np.ascontiguousarray(np.asarray(array).astype(storage_dtype(dtype), copy=False))


def from_device_layout(array: np.ndarray, dtype: str) -> np.ndarray:
    """What the kernels wrote, as the host holds it (bf16 widened to float32)."""
    if dtype == "bf16":
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array


def _aligned(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass(frozen=True)
class MemoryPlan:
    total_bytes: int
    offsets: dict[str, int]  # of each input and output; the arena starts at 0
    constant_offsets: dict[str, int] = field(default_factory=dict)  # of each constant, after the outputs


def plan_memory(manifest: Manifest) -> MemoryPlan:
    offset = _aligned(manifest.arena_bytes)
    offsets, constant_offsets = {}, {}
    for spec in (*manifest.inputs, *manifest.outputs):
        offsets[spec.name] = offset
        offset += _aligned(spec.nbytes)
    for constant in manifest.constants:
        constant_offsets[constant.name] = offset
        offset += _aligned(constant.nbytes)
    return MemoryPlan(max(offset, ALIGNMENT), offsets, constant_offsets)


def tensor_view(memory, offset: int, shape: Sequence[int], dtype: str):
    """A typed view into the one allocation (numpy or CuPy alike)."""
    nbytes = math.prod(shape) * storage_dtype(dtype).itemsize
    return memory[offset : offset + nbytes].view(storage_dtype(dtype)).reshape(tuple(shape))


def inputs_by_name(manifest: Manifest, inputs: Mapping[str, Any] | Sequence[Any]) -> Mapping[str, Any]:
    """Inputs given by name, or in manifest order (their count checked)."""
    if isinstance(inputs, Mapping):
        return inputs
    if len(inputs) != len(manifest.inputs):
        raise ExecutionError(f"the program takes {len(manifest.inputs)} inputs, got {len(inputs)}")
    return {spec.name: value for spec, value in zip(manifest.inputs, inputs)}


def gather_inputs(manifest: Manifest, inputs: Mapping[str, Any] | Sequence[Any]) -> dict[str, np.ndarray]:
    """Inputs by name (or in manifest order), checked against their specs."""
    inputs = inputs_by_name(manifest, inputs)
    gathered = {}
    for spec in manifest.inputs:
        if spec.name not in inputs:
            raise ExecutionError(f"missing input '{spec.name}'")
        value = np.asarray(inputs[spec.name])
        if value.shape != spec.shape:
            raise ExecutionError(f"input '{spec.name}' has shape {list(value.shape)}, expected {list(spec.shape)}")
        gathered[spec.name] = value
    return gathered


def bind_dims(manifest: Manifest, inputs: Mapping[str, Any] | Sequence[Any]) -> dict[str, int]:
    """The named dims of one call of a dynamic manifest, from its inputs'
    shapes; every other `?` size and the runtime checks are checked here,
    before any kernel runs."""
    from fusecc.passes.backends.cuda.manifest_dims import evaluate

    inputs = inputs_by_name(manifest, inputs)
    shapes = {}
    for spec in manifest.inputs:
        if spec.name not in inputs:
            raise ExecutionError(f"missing input '{spec.name}'")
        shapes[spec.name] = tuple(np.shape(inputs[spec.name]))
        if len(shapes[spec.name]) != len(spec.shape):
            raise ExecutionError(f"input '{spec.name}' has shape {list(shapes[spec.name])}, expected rank {len(spec.shape)} ({list(spec.shape)})")
    dims = {}
    for name, (source, axis) in manifest.dims.items():
        dims[name] = shapes[source][axis]
        if dims[name] < 1:
            raise ExecutionError(f"input '{source}' axis {axis} is {dims[name]}, but the dim {name} must be at least 1")
    for spec in manifest.inputs:
        want = [evaluate(d, dims) for d in spec.shape]
        if list(shapes[spec.name]) != want:
            raise ExecutionError(f"input '{spec.name}' has shape {list(shapes[spec.name])}, expected {list(spec.shape)} = {want} at {dims}")
    for lhs, rhs, where, message in manifest.checks:
        if evaluate(lhs, dims) != evaluate(rhs, dims):
            raise ExecutionError(f"{where}: error: {message}: {lhs} = {evaluate(lhs, dims)}, {rhs} = {evaluate(rhs, dims)}")
    return dims


@functools.lru_cache(maxsize=32)
def _specialized(manifest: Manifest, dims: tuple) -> Manifest:
    from fusecc.passes.backends.cuda.manifest_dims import specialize

    return specialize(manifest, dict(dims))


def for_call(manifest: Manifest, inputs: Mapping[str, Any] | Sequence[Any]) -> Manifest:
    """The static manifest that runs these inputs: `manifest` itself, or a
    dynamic one at the dims the inputs bind (kept for the recent shapes)."""
    if not manifest.is_dynamic:
        return manifest
    return _specialized(manifest, tuple(sorted(bind_dims(manifest, inputs).items())))


def constant_values(manifest: Manifest, folder: str | os.PathLike | None = None) -> dict[str, np.ndarray]:
    """Each constant's values in device layout: the manifest's own (built in
    this process) or read from the file it names inside `folder`."""
    values: dict[str, np.ndarray] = {}
    files: dict[str, Any] = {}
    for spec in manifest.constants:
        data = spec.data
        if data is None:
            data = _read_constant(spec, folder, files)
        data = np.asarray(data)
        if data.shape != spec.shape:
            raise ExecutionError(f"constant '{spec.name}' has shape {list(data.shape)}, the manifest says {list(spec.shape)}")
        values[spec.name] = to_device_layout(data, spec.dtype)
    return values


def _read_constant(spec, folder, files: dict) -> np.ndarray:
    from fusecc.compiler.paths import PathOutsideFolder, resolve_inside
    from fusecc.compiler.resources import ResourceError, ResourceFile
    from fusecc.compiler.types import SCALAR_TYPES, TensorType

    if folder is None:
        raise ExecutionError(f"constant '{spec.name}' is read from '{spec.file}' beside the manifest: give the manifest's folder")
    try:
        if spec.file not in files:
            files[spec.file] = ResourceFile(resolve_inside(folder, spec.file, "a manifest's constants file"))
        return files[spec.file].array(spec.tensor, TensorType(spec.shape, SCALAR_TYPES[spec.dtype]))
    except (PathOutsideFolder, ResourceError) as exc:
        raise ExecutionError(f"constant '{spec.name}': {exc}") from None


def scalar_value(arg: ScalarArg):
    if arg.dtype == "bf16":
        from fusecc.runtime.cuda.cpu_harness.loader import bf16_bits

        return np.uint16(bf16_bits(np.float32(arg.value)))
    return storage_dtype(arg.dtype).type(arg.value)


class Bound:
    """The one allocation of a program, viewed as its tensors."""

    def __init__(self, manifest: Manifest, memory, constants: Mapping[str, np.ndarray] | None = None):
        """`constants` (constant_values) are written into numpy memory here;
        for device memory, the runtime writes `self.constants` itself."""
        self.manifest = manifest
        self.memory = memory
        self.plan = plan_memory(manifest)
        self.tensors = {s.name: tensor_view(memory, self.plan.offsets[s.name], s.shape, s.dtype) for s in (*manifest.inputs, *manifest.outputs)}
        self.constants = {c.name: tensor_view(memory, self.plan.constant_offsets[c.name], c.shape, c.dtype) for c in manifest.constants}
        if constants is not None:
            for name, view in self.constants.items():
                view[...] = constants[name]

    def args(self, launch: Launch) -> list:
        bound = []
        for arg in launch.args:
            if isinstance(arg, TensorArg):
                bound.append(self.tensors[arg.name])
            elif isinstance(arg, ArenaArg):
                bound.append(tensor_view(self.memory, arg.offset, arg.shape, arg.dtype))
            elif isinstance(arg, ConstantArg):
                bound.append(self.constants[arg.name])
            elif isinstance(arg, SizeArg):
                bound.append(np.int64(arg.size))  # a `?` size of a specialised manifest (manifest_dims.specialize)
            else:
                bound.append(scalar_value(arg))
        return bound


def run_on_cpu(
    manifest: Manifest,
    source: str,
    inputs: Mapping[str, Any] | Sequence[Any],
    *,
    cache_dir: str | os.PathLike | None = None,
    workers: int | None = None,
    folder: str | os.PathLike | None = None,
) -> dict[str, np.ndarray]:
    """Compile `source` for the CPU harness and run the manifest's launches in
    order (constants from `folder` when the manifest was read from a file)."""
    from fusecc.runtime.cuda.cpu_harness import CpuModule

    manifest = for_call(manifest, inputs)
    host_inputs = gather_inputs(manifest, inputs)
    module = CpuModule.compile(source, manifest.source, cache_dir=cache_dir)
    bound = Bound(manifest, np.zeros(plan_memory(manifest).total_bytes, dtype=np.uint8), constant_values(manifest, folder))
    for spec in manifest.inputs:
        bound.tensors[spec.name][...] = to_device_layout(host_inputs[spec.name], spec.dtype)
    for launch in manifest.launches:
        module.launch(launch.kernel, launch.grid, launch.block, bound.args(launch), launch.shared_bytes, workers)
    return {spec.name: from_device_layout(bound.tensors[spec.name].copy(), spec.dtype) for spec in manifest.outputs}
