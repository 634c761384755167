"""Running a schedule whose shapes have `?` dims (docs/dynamic-shapes.md).

Once per call, the inputs' shapes bind the schedule's named dims
(`ScheduleOp.bind_dims`, which checks ties and static sizes); every
expression of the schedule (arena size, buffer offsets and sizes, output
shapes, kernel worker extents) is then evaluated. What that gives (kernel
arguments with their sizes, the pieces each launch is split into) is kept
per distinct dims, so a second call at the same shape costs what a static
call costs: addresses of the call's inputs and outputs filled into prepared
argument lists.

Launches that read only constants run once at load, as in the static plan,
when all their arguments have static shapes; others run per call.
"""

from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from fusecc.compiler.ir import Value
from fusecc.compiler.types import MemRefType, bf16, f64
from fusecc.dialects import loop
from fusecc.dialects.loop import ShapeMismatch, concrete_type, evaluate_size
from fusecc.passes.backends.llvm.emit import written_arguments
from fusecc.runtime.cpu.buffers import address_of, aligned_empty, aligned_zeros, output_arrays
from fusecc.runtime.cpu.call_path import StepProgram, run_profiled
from fusecc.runtime.cpu.load_time import argument_uses, load_time_launches
from fusecc.runtime.loop_interpreter import from_buffer, storage_dtype, to_buffer
from fusecc.runtime.reference import InterpreterError

# Distinct shapes whose prepared launches are kept (least recently used go).
BOUND_SHAPES = 16


def kernel_arguments(kernel_types, values: Sequence[tuple[int, MemRefType | None]]) -> list:
    """A launch's C arguments: each memref's address, then the sizes of its
    `?` axes (the ABI of passes/backends/llvm/kernel.py); scalars as they are."""
    out = []
    for t, (address, concrete) in zip(kernel_types, values):
        out.append(address)
        if isinstance(t, MemRefType):
            out.extend(concrete.shape[axis] for axis in t.dynamic_axes)
    return out


def worker_extent(abi, concrete_types) -> int:
    if isinstance(abi.worker_extent, int):
        return abi.worker_extent
    sizes = {f"a{i}_{axis}": d for i, t in enumerate(concrete_types) if isinstance(t, MemRefType) for axis, d in enumerate(t.shape)}
    return abi.worker_extent.evaluate(sizes)


class DynamicSchedulePlan:
    """A `?`-shaped schedule resolved once; bound to each call's dims."""

    def __init__(self, program, schedule: loop.ScheduleOp):
        self.program = program
        self.schedule = schedule
        self.lock = threading.Lock()
        self.arena = aligned_zeros(0)
        self.sizes = schedule.argument_sizes()
        self.binding = loop.DimBinding(schedule)
        # per input: its type, the dtype its storage has, and whether an array may be used in place
        self.inputs = [(arg.type, storage_dtype(arg.type), arg.type.element_type not in (bf16, f64)) for arg in schedule.input_args]
        self.constants: dict[Value, np.ndarray] = {}
        self.packed: dict[Value, np.ndarray] = {}
        at_load = self._launches_at_load(schedule)
        for op in schedule.body:
            if isinstance(op, loop.ConstantOp):
                t = op.result.type
                buffer = aligned_empty(t.byte_size)
                buffer[:] = to_buffer(op.attr("value").array, t).reshape(-1).view(np.uint8)
                self.constants[op.result] = buffer
        for targets in at_load.values():
            for v in targets:
                self.packed[v] = aligned_empty(v.type.byte_size)
        self.writes_inputs: set[int] = set()
        self.writes_constants = False
        self.ops = []
        for op in schedule.body:
            if isinstance(op, loop.ReturnOp):
                break
            if op in at_load:
                continue
            if isinstance(op, loop.LaunchOp):
                for i in written_arguments(op.resolve()):
                    root = _root(op.operands[i])
                    if root in schedule.input_args:
                        self.writes_inputs.add(list(schedule.input_args).index(root))
                    self.writes_constants |= root in self.constants
            elif isinstance(op, loop.CopyOp):
                self.writes_constants |= _root(op.target) in self.constants
            elif not isinstance(op, (loop.ArenaViewOp, loop.ViewOp, loop.ConstantOp)):
                raise InterpreterError(f"the CPU runtime cannot run '{op.name}' in a schedule")
            self.ops.append(op)
        self._pristine = {v: b.copy() for v, b in self.constants.items()} if self.writes_constants else None
        self._bound: dict[tuple, list] = {}
        self.load_launches = len(at_load)
        self.launches_at_load = frozenset(at_load)  # not among a call's steps (driver/measured_variants.py counts those)
        self._run_at_load(at_load)

    def _launches_at_load(self, schedule: loop.ScheduleOp) -> dict:
        """load_time.py's launches (packing a constant weight) whose work does
        not depend on the dims: every argument they read or write is static
        and so is their worker extent. Others run per call."""
        found = {}
        for op, targets in load_time_launches(schedule).items():
            read, written = argument_uses(op.resolve())
            static = all(not op.operands[i].type.has_dynamic_shape for i in read | written)
            if static and isinstance(self.program.kernels[op.kernel_name].abi.worker_extent, int):
                found[op] = targets
        return found

    def _run_at_load(self, at_load) -> None:
        for op in at_load:
            kernel = self.program.kernels[op.kernel_name]
            spare = []
            values = []
            for v in op.operands:
                buffer = self.constants.get(_root(v)) if _root(v) in self.constants else self.packed.get(v)
                t = v.type
                if buffer is None:  # an argument the launch does not touch (say, the group's `?`-sized input)
                    t = t.with_sizes(1 for _ in t.dynamic_axes)
                    buffer = aligned_zeros(max(1, t.byte_size))
                    spare.append(buffer)
                values.append((buffer.ctypes.data, t))
            args = kernel_arguments(kernel.abi.params, values)
            self.program.pool.run(kernel.function, args, kernel.abi.worker_extent, kernel.abi.work_per_iteration)

    # --- binding -----------------------------------------------------------------
    def _bind(self, dims: dict[str, int]) -> list:
        """Steps for one set of dims: ("launch", function, args, [(arg index,
        root, offset)] to fill per call, pieces) or ("copy", (root, offset),
        (root, offset), bytes). Roots: ("arena",) ("input", i) ("output", i)."""
        schedule = self.schedule
        arena_bytes = evaluate_size(schedule.arena_size, dims)
        if arena_bytes > self.arena.size:
            self.arena = aligned_zeros(arena_bytes)
            self._bound.clear()  # prepared arena addresses are stale
        n_inputs = len(schedule.inputs)
        slots: dict[Value, tuple] = {}  # value -> (root, byte offset, concrete type)
        for i, arg in enumerate(schedule.body.args):
            t = arg.type.with_sizes(evaluate_size(e, dims) for e in self.sizes[i])
            slots[arg] = (("input", i) if i < n_inputs else ("output", i - n_inputs), 0, t)
        fixed = {("arena",): self.arena.ctypes.data}
        for n, (v, buffer) in enumerate(list(self.constants.items()) + list(self.packed.items())):
            slots[v] = (("fixed", n), 0, v.type)
            fixed[("fixed", n)] = buffer.ctypes.data
        steps = []
        for op in self.ops:
            if isinstance(op, loop.ArenaViewOp) and op.result not in self.packed:
                slots[op.result] = (("arena",), evaluate_size(op.offset, dims), concrete_type(op, dims))
            elif isinstance(op, loop.ViewOp):
                root, offset, _ = slots[op.source]
                slots[op.result] = (root, offset + evaluate_size(op.offset, dims), concrete_type(op, dims))
            elif isinstance(op, loop.LaunchOp):
                kernel = self.program.kernels[op.kernel_name]
                places = [slots[v] for v in op.operands]
                args = kernel_arguments(kernel.abi.params, [(fixed.get(root, 0) + offset, t) for root, offset, t in places])
                varying, position = [], 0
                for t, (root, offset, _) in zip(kernel.abi.params, places):
                    if root not in fixed:
                        varying.append((position, root, offset))
                    position += 1 + (len(t.dynamic_axes) if isinstance(t, MemRefType) else 0)
                extent = worker_extent(kernel.abi, [t for _, _, t in places])
                steps.append(("launch", kernel, args, varying, self.program.pool.pieces(extent, kernel.abi.work_per_iteration)))
            elif isinstance(op, loop.CopyOp):
                (src_root, src_offset, src), (dst_root, dst_offset, dst) = slots[op.source], slots[op.target]
                if src.byte_size != dst.byte_size:
                    raise InterpreterError(f"loop.copy at {op.location} copies {src.byte_size} bytes into a {dst.byte_size}-byte buffer")
                steps.append(("copy", (src_root, src_offset), (dst_root, dst_offset), src.byte_size))
        outputs = [slots[a][2] for a in schedule.output_args]
        return [steps, outputs, fixed, StepProgram(steps, fixed, self.program.pool, n_inputs, len(outputs))]

    def run(self, inputs: Sequence[np.ndarray], profile: list | None = None) -> list[np.ndarray]:
        schedule = self.schedule
        inputs = list(inputs)
        if len(inputs) != len(schedule.inputs):
            raise InterpreterError(f"@{schedule.sym_name} takes {len(schedule.inputs)} inputs, got {len(inputs)}")
        inputs = [np.asarray(a) for a in inputs]
        try:
            dims = self.binding.bind([a.shape for a in inputs])
        except ShapeMismatch as exc:
            raise InterpreterError(f"@{schedule.sym_name}: {exc}") from None
        buffers = []
        for i, ((t, dtype, in_place), array) in enumerate(zip(self.inputs, inputs)):
            if not in_place or array.dtype != dtype or not array.flags.c_contiguous or i in self.writes_inputs:
                array = to_buffer(array, t.with_sizes(array.shape[axis] for axis in t.dynamic_axes))
            buffers.append(array)
        with self.lock:
            key = tuple(dims[name] for name in self.binding.names)
            bound = self._bound.pop(key, None) or self._bind(dims)
            self._bound[key] = bound  # most recently used last
            while len(self._bound) > BOUND_SHAPES:
                del self._bound[next(iter(self._bound))]
            steps, output_types, fixed, call = bound
            outputs, output_addresses = output_arrays(output_types)
            if self.writes_constants:
                for v, pristine in self._pristine.items():
                    self.constants[v][:] = pristine
            input_addresses = [address_of(b) for b in buffers]
            if profile is None:
                call.run(input_addresses, output_addresses)
            else:
                bases = dict(fixed)
                bases.update({("input", i): a for i, a in enumerate(input_addresses)})
                bases.update({("output", i): a for i, a in enumerate(output_addresses)})
                run_profiled(steps, self.program.pool, bases, profile)
        return [from_buffer(b, t) if t.element_type is bf16 else b for b, t in zip(outputs, output_types)]


def _root(value: Value) -> Value:
    while isinstance(value.defining_op, loop.ViewOp):
        value = value.defining_op.source
    return value


__all__ = ["BOUND_SHAPES", "DynamicSchedulePlan", "kernel_arguments", "worker_extent"]
