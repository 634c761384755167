"""Running compiled loop-level programs: kernels, the thread pool, schedules.

A launch splits its kernel's worker range [0, extent) into one contiguous
piece per thread (one thread per available CPU; fewer when the extent is smaller
or the work too small to pay for a thread hand-off) and calls the kernel on
each piece through ctypes, which releases the GIL, so the pieces run in
parallel. A schedule runs over one arena (a 64-byte aligned numpy buffer
kept between runs): views, copies and launches in order, as the loop
interpreter does.
"""

from __future__ import annotations

import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.types import MemRefType, ScalarType, bf16, f64
from fusecc.dialects import loop
from fusecc.passes.backends.llvm.emit import KernelABI, emit_llvm, written_arguments
from fusecc.runtime.loop_interpreter import from_buffer, storage_dtype, to_buffer
from fusecc.runtime.reference import InterpreterError

from fusecc.runtime.cpu import jit
from fusecc.runtime.cpu.buffers import address_of, aligned_empty, aligned_zeros, output_arrays
from fusecc.runtime.cpu.call_path import StepProgram, run_profiled
from fusecc.runtime.cpu.dynamic import DynamicSchedulePlan, kernel_arguments, worker_extent
from fusecc.runtime.cpu.load_time import load_time_launches
from fusecc.runtime.cpu.team import team_for

# Below this many scalar operations (the loop IR's, per element) a launch
# runs on the calling thread: handing a piece to another thread costs 20-70
# us here (measured), the time vectorised code (16 lanes, ~2 instructions a
# cycle) needs for a few million of them. Measured: the encoder block's
# layernorm kernels (3.2 M, 41 us on one core) took 144 us on two threads.
MIN_PARALLEL_WORK = 1 << 22

_CTYPES = {
    "f32": ctypes.c_float, "f64": ctypes.c_double, "i1": ctypes.c_bool, "i8": ctypes.c_int8,
    "i32": ctypes.c_int32, "i64": ctypes.c_int64, "index": ctypes.c_int64,
}


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, where known)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def split_range(extent: int, parts: int) -> list[tuple[int, int]]:
    """[0, extent) as `parts` contiguous pieces whose sizes differ by at most one."""
    parts = max(1, min(parts, extent))
    return [(extent * k // parts, extent * (k + 1) // parts) for k in range(parts)]


class WorkerPool:
    """Threads that run pieces of a launch; the caller runs the first piece."""

    def __init__(self, threads: int | None = None):
        self.threads = max(1, threads or available_cpus())
        self._executor = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="fusecc-cpu") if self.threads > 1 else None

    def team(self):
        """The process's native team of this pool's thread count (team.py)."""
        return team_for(self.threads)

    def pieces(self, extent: int, work_per_iteration: int) -> list[tuple[int, int]]:
        parallel = self.threads > 1 and extent > 1 and extent * work_per_iteration >= MIN_PARALLEL_WORK
        return split_range(extent, self.threads if parallel else 1)

    def run(self, function, args: Sequence, extent: int, work_per_iteration: int) -> None:
        self.run_pieces(function, args, self.pieces(extent, work_per_iteration))

    def run_pieces(self, function, args: Sequence, pieces: Sequence[tuple[int, int]]) -> None:
        if len(pieces) == 1:  # most launches of small programs: no futures
            function(*args, *pieces[0])
            return
        if not pieces:
            return
        futures = [self._executor.submit(function, *args, begin, end) for begin, end in pieces[1:]]
        begin, end = pieces[0]
        function(*args, begin, end)
        for future in futures:
            future.result()


_default_pool: WorkerPool | None = None


def default_pool() -> WorkerPool:
    """The shared pool: $FUSECC_CPU_WORKERS threads (what `fusecc run
    --threads` sets; the CUDA CPU harness reads it too), else one per CPU."""
    global _default_pool
    if _default_pool is None:
        requested = os.environ.get("FUSECC_CPU_WORKERS", "")
        _default_pool = WorkerPool(int(requested) if requested.isdigit() else None)
    return _default_pool


@dataclass
class Kernel:
    abi: KernelABI
    function: object  # the ctypes function

    def argument(self, t, value):
        if isinstance(t, MemRefType):
            return value
        return _CTYPES[t.name](value)


class CompiledProgram:
    """A loop-level module compiled for this CPU."""

    def __init__(self, module: Operation, vectorize: str = "explicit", pool: WorkerPool | None = None, isa: frozenset | None = None):
        """`isa`: the instruction set extensions the emitted IR may use
        directly (emit_llvm); default this host's."""
        self.module = module
        self.llvm = emit_llvm(module, vectorize=vectorize, isa=jit.host_isa() if isa is None else isa)
        compiled = jit.compile_ir(self.llvm.text, list(self.llvm.kernels))
        self._bind_kernels(compiled, self.llvm.kernels, pool)

    @classmethod
    def from_object(cls, objects: list[bytes], abis: dict[str, KernelABI], layouts: Sequence[PlanLayout], pool: WorkerPool | None = None) -> "CompiledProgram":
        """A program from the object files of its kernels and its static
        schedules as data (runtime/cpu/image.py): no IR, no LLVM run.
        `module` and `llvm` are None."""
        program = cls.__new__(cls)
        program.module = program.llvm = None
        program._bind_kernels(jit.load_object(objects, list(abis)), abis, pool)
        for layout in layouts:
            program._plans[layout.name] = SchedulePlan(program, layout)
        return program

    def _bind_kernels(self, compiled: "jit.CompiledModule", abis: dict[str, KernelABI], pool: WorkerPool | None) -> None:
        self._engine = compiled.engine
        self.objects = compiled.objects
        self.pool = pool or default_pool()
        self.kernels: dict[str, Kernel] = {}
        for name, abi in abis.items():
            params = []
            for t in abi.params:  # a memref's `?` sizes follow its pointer (passes/backends/llvm/kernel.py)
                params += [ctypes.c_void_p] + [ctypes.c_int64] * len(t.dynamic_axes) if isinstance(t, MemRefType) else [_CTYPES.get(t.name, ctypes.c_float)]
            if any(isinstance(t, ScalarType) and t.name not in _CTYPES for t in abi.params):
                raise InterpreterError(f"kernel @{name} takes an f16/bf16 scalar argument, which the CPU runtime cannot pass")
            prototype = ctypes.CFUNCTYPE(None, *params, ctypes.c_int64, ctypes.c_int64)
            self.kernels[name] = Kernel(abi, prototype(compiled.addresses[name]))
        self._plans: dict[str, SchedulePlan] = {}

    # --- kernels -----------------------------------------------------------------
    def launch(self, name: str, args: Sequence, begin: int = 0, end: int | None = None) -> None:
        """Run a kernel over worker iterations [begin, end) (default: all),
        split over the pool; memref arguments are numpy arrays in storage
        layout (bf16 as uint16) with the alignment the kernel was compiled for."""
        kernel = self.kernels[name]
        values = [kernel.argument(t, self._address(name, t, align, a)) for t, align, a in zip(kernel.abi.params, kernel.abi.alignments, args)]
        if any(isinstance(t, MemRefType) and t.has_dynamic_shape for t in kernel.abi.params):
            concrete = [t.with_sizes(np.shape(a)[axis] for axis in t.dynamic_axes) if isinstance(t, MemRefType) else t for t, a in zip(kernel.abi.params, args)]
            values = kernel_arguments(kernel.abi.params, list(zip(values, concrete)))
            end = worker_extent(kernel.abi, concrete) if end is None else end
        end = kernel.abi.worker_extent if end is None else end
        pieces = [(begin + b, begin + e) for b, e in self.pool.pieces(end - begin, kernel.abi.work_per_iteration)]
        self.pool.run_pieces(kernel.function, values, pieces)

    @staticmethod
    def _address(name: str, t, align: int, a):
        if not isinstance(t, MemRefType):
            return a
        if t.has_dynamic_shape:
            static = all(d == got for d, got in zip(t.shape, np.shape(a)) if type(d) is int)
            if not isinstance(a, np.ndarray) or a.ndim != t.rank or not static or a.itemsize != storage_dtype(t).itemsize or not a.flags.c_contiguous:
                raise InterpreterError(f"an argument of @{name} must be a contiguous numpy array of shape {t} (storage layout)")
        elif not isinstance(a, np.ndarray) or a.nbytes != t.byte_size or not a.flags.c_contiguous:
            raise InterpreterError(f"an argument of @{name} must be a contiguous numpy array of {t.byte_size} bytes ({t})")
        if a.ctypes.data % align:
            raise InterpreterError(f"an argument of @{name} must be {align}-byte aligned (see executor.aligned_empty)")
        return a.ctypes.data

    # --- schedules -----------------------------------------------------------------
    def schedule_names(self) -> list[str]:
        if self.module is None:  # made from an image: its schedules are planned already
            return list(self._plans)
        return [op.sym_name for op in self.module.body if isinstance(op, loop.ScheduleOp)]

    def prepare(self, entry: str | None = None) -> "SchedulePlan | DynamicSchedulePlan":
        """The resolved schedule (default @main, else the first), made on
        first use: buffers placed, constants copied, constant launches run."""
        plan = self._plans.get(entry)
        if plan is not None:  # every call after the first: no walk over the module
            return plan
        names = self.schedule_names()
        if entry is None:
            if not names:
                raise InterpreterError("the module has no loop.schedule")
            entry = "main" if "main" in names else names[0]
        plan = self._plans.get(entry)
        if plan is None:
            schedule = self.module.lookup(entry)
            if schedule is None or not isinstance(schedule, loop.ScheduleOp):
                raise InterpreterError(f"no loop.schedule @{entry} in the module")
            dynamic = schedule.is_dynamic or not isinstance(schedule.arena_size, int)
            plan = self._plans[entry] = DynamicSchedulePlan(self, schedule) if dynamic else SchedulePlan(self, schedule)
        return plan

    def run(self, inputs: Sequence[np.ndarray], entry: str | None = None, profile: list | None = None) -> list[np.ndarray]:
        """Run a schedule (default @main, else the first); with `profile`, a
        list that receives (kernel name or "copy", seconds) per step."""
        return self.prepare(entry).run(inputs, profile)


@dataclass
class PlanLayout:
    """A static schedule resolved to plain data: what a SchedulePlan needs,
    with no IR left in it (runtime/cpu/image.py stores it, so a warm start
    skips the passes). Slots are (root, byte offset); a root is
    ("input", i), ("output", i), ("arena",), ("const", i) or ("packed", i)."""

    name: str
    arena_size: int
    input_names: list[str]
    input_types: list[MemRefType]
    output_types: list[MemRefType]
    constants: list[np.ndarray]  # loop.constant buffers in storage bytes (uint8, 64-byte aligned)
    packed_sizes: list[int]  # bytes of each buffer a load-time launch fills
    load_steps: list[tuple]  # (kernel name, slots, byte sizes of the operands)
    steps: list[tuple]  # ("launch", kernel name, slots) | ("copy", source slot, target slot, bytes)
    inputs_written: set[int]
    constants_written: bool


def plan_layout(schedule: loop.ScheduleOp) -> PlanLayout:
    """Where each buffer of a static schedule lives and what runs in order."""
    n_inputs = len(schedule.inputs)
    slots: dict[Value, tuple] = {}
    for i, arg in enumerate(schedule.body.args):
        slots[arg] = (("input", i) if i < n_inputs else ("output", i - n_inputs), 0)
    steps: list[tuple] = []
    constants: list[np.ndarray] = []
    # Launches that read only constants (packing a constant weight) run
    # once, at load, into buffers of their own (runtime/cpu/load_time.py).
    at_load = load_time_launches(schedule)
    filled_at_load = {v: i for i, v in enumerate(v for targets in at_load.values() for v in targets)}
    load_steps: list[tuple] = []
    written_roots = set()
    written_by_kernel: dict[str, list[int]] = {}
    for op in schedule.body:
        if isinstance(op, loop.ConstantOp):
            t = op.result.type
            array = op.attr("value").array
            buffer = aligned_empty(t.byte_size)
            if t.element_type.is_float and t.element_type is not bf16 and array.dtype == storage_dtype(t):
                buffer.view(array.dtype)[:] = array.reshape(-1)  # already in storage form: one copy (a weight is megabytes)
            else:
                buffer[:] = to_buffer(array, t).reshape(-1).view(np.uint8)
            slots[op.result] = (("const", len(constants)), 0)
            constants.append(buffer)
        elif isinstance(op, loop.ArenaViewOp):
            slots[op.result] = (("packed", filled_at_load[op.result]), 0) if op.result in filled_at_load else (("arena",), op.offset)
        elif isinstance(op, loop.ViewOp):
            root, offset = slots[op.source]
            slots[op.result] = (root, offset + op.offset)
        elif isinstance(op, loop.LaunchOp):
            operands = [slots[v] for v in op.operands]
            if op in at_load:
                load_steps.append((op.kernel_name, operands, [v.type.byte_size for v in op.operands]))
                continue
            if op.kernel_name not in written_by_kernel:
                written_by_kernel[op.kernel_name] = list(written_arguments(op.resolve()))
            for i in written_by_kernel[op.kernel_name]:
                written_roots.add(operands[i][0])
            steps.append(("launch", op.kernel_name, operands))
        elif isinstance(op, loop.CopyOp):
            written_roots.add(slots[op.target][0])
            steps.append(("copy", slots[op.source], slots[op.target], op.source.type.byte_size))
        elif isinstance(op, loop.ReturnOp):
            break
        else:
            raise InterpreterError(f"the CPU runtime cannot run '{op.name}' in a schedule")
    return PlanLayout(
        name=schedule.sym_name,
        arena_size=schedule.arena_size,
        input_names=[arg.name_hint or f"arg{i}" for i, arg in enumerate(schedule.input_args)],
        input_types=[arg.type for arg in schedule.input_args],
        output_types=[arg.type for arg in schedule.output_args],
        constants=constants,
        packed_sizes=[v.type.byte_size for v in filled_at_load],
        load_steps=load_steps,
        steps=steps,
        inputs_written={root[1] for root in written_roots if root[0] == "input"},
        constants_written=any(root[0] == "const" for root in written_roots),
    )


class SchedulePlan:
    """A static schedule made ready to run: its arena allocated, constant
    launches run, the per-call work bound once."""

    def __init__(self, program: "CompiledProgram", schedule: "loop.ScheduleOp | PlanLayout"):
        self.program = program
        layout = schedule if isinstance(schedule, PlanLayout) else plan_layout(schedule)
        self.layout = layout
        self.arena = aligned_zeros(layout.arena_size)
        self.lock = threading.Lock()
        self.constants = layout.constants
        self.packed: list[np.ndarray] = [aligned_empty(n) for n in layout.packed_sizes]
        kernels = program.kernels
        self.steps = [(step[0], kernels[step[1]], step[2]) if step[0] == "launch" else step for step in layout.steps]
        load_steps = [(kernels[name], slots, sizes) for name, slots, sizes in layout.load_steps]
        self.inputs_written = layout.inputs_written
        self.constants_written = layout.constants_written
        self._pristine = [c.copy() for c in self.constants] if self.constants_written else None
        self.load_launches = len(load_steps)
        self._run_at_load(load_steps)
        # per input: name, type, storage dtype, whether an array in storage form is used in place
        self._input_specs = [(name, t, storage_dtype(t), t.element_type not in (bf16, f64) and i not in self.inputs_written)
                             for i, (name, t) in enumerate(zip(layout.input_names, layout.input_types))]
        self._bound = self._bind_steps()
        self._call = StepProgram(self._bound, self._fixed_addresses(), program.pool, len(layout.input_types), len(layout.output_types))

    def _bind_steps(self) -> list[tuple]:
        """The steps with what does not change between calls worked out once
        (per-call Python overhead, issue 11.2): arena, constant and packed
        addresses are fixed, only input and output addresses vary, and the
        pieces a launch is split into depend only on the kernel and the pool.
        In call_path.py's form: ("launch", kernel, args with fixed addresses
        filled, [(index, root, offset) to fill per call], pieces) or the copy."""
        fixed = self._fixed_addresses()
        bound = []
        for step in self.steps:
            if step[0] != "launch":
                bound.append(step)
                continue
            kernel, slots = step[1], step[2]
            args = [fixed.get(root, 0) + offset for root, offset in slots]
            varying = [(i, root, offset) for i, (root, offset) in enumerate(slots) if root not in fixed]
            pieces = self.program.pool.pieces(kernel.abi.worker_extent, kernel.abi.work_per_iteration)
            bound.append(("launch", kernel, args, varying, pieces))
        return bound

    def _fixed_addresses(self) -> dict:
        fixed = {("arena",): self.arena.ctypes.data}
        fixed.update({("const", i): c.ctypes.data for i, c in enumerate(self.constants)})
        fixed.update({("packed", i): p.ctypes.data for i, p in enumerate(self.packed)})
        return fixed

    def _run_at_load(self, steps: list[tuple]) -> None:
        """Run the launches that read only constants, once. Arguments they
        do not touch (the group's other operands) get placeholder buffers."""
        bases = {("arena",): self.arena.ctypes.data}
        bases.update({("const", i): c.ctypes.data for i, c in enumerate(self.constants)})
        bases.update({("packed", i): p.ctypes.data for i, p in enumerate(self.packed)})
        placeholder = aligned_zeros(max((n for _, slots, sizes in steps for (root, _), n in zip(slots, sizes) if root not in bases), default=0))
        for kernel, slots, _ in steps:
            args = [bases.get(root, placeholder.ctypes.data) + (offset if root in bases else 0) for root, offset in slots]
            self.program.pool.run(kernel.function, args, kernel.abi.worker_extent, kernel.abi.work_per_iteration)

    def run(self, inputs: Sequence[np.ndarray], profile: list | None = None) -> list[np.ndarray]:
        layout = self.layout
        inputs = list(inputs)
        if len(inputs) != len(layout.input_types):
            raise InterpreterError(f"@{layout.name} takes {len(layout.input_types)} inputs, got {len(inputs)}")
        buffers, addresses = [], []
        for (name, t, dtype, in_place), array in zip(self._input_specs, inputs):
            array = np.asarray(array)
            if array.shape != t.shape:
                raise InterpreterError(f"input {name} has shape {list(array.shape)}, expected {list(t.shape)}")
            # to_buffer is the interpreter's conversion; an array already in
            # storage form (every dtype but f64, which passes through f32) is used in place
            if not in_place or array.dtype != dtype or not array.flags.c_contiguous:
                array = to_buffer(array, t)
            buffers.append(array)  # alive until the call returns
            addresses.append(address_of(array))
        outputs, output_addresses = output_arrays(layout.output_types)
        self.call(addresses, output_addresses, profile)
        return [from_buffer(b, t) if t.element_type is bf16 else b for b, t in zip(outputs, layout.output_types)]

    def call(self, input_addresses: Sequence[int], output_addresses: Sequence[int], profile: list | None = None) -> None:
        """Run on buffers given by address, which the caller has checked
        (what `run` does for arrays; the torch backend passes tensors'
        data pointers): inputs contiguous, of the schedule's shapes, in
        storage layout, none in `inputs_written`; outputs the same and
        64-byte aligned (the emitted code assumes it)."""
        with self.lock:
            if self.constants_written:  # a kernel writes into a constant: every run starts from its value
                for buffer, pristine in zip(self.constants, self._pristine):
                    buffer[:] = pristine
            if profile is None:
                self._call.run(input_addresses, output_addresses)
            else:
                bases = self._fixed_addresses()
                bases.update({("input", i): a for i, a in enumerate(input_addresses)})
                bases.update({("output", i): a for i, a in enumerate(output_addresses)})
                run_profiled(self._bound, self.program.pool, bases, profile)


_programs: dict[tuple[str, str, str], CompiledProgram] = {}


def compile_program(module: Operation, vectorize: str = "explicit") -> CompiledProgram:
    """A CompiledProgram for `module`, reused while the module's text, and
    the files its `dense_resource`s read, are the same."""
    from fusecc.compiler.printer import print_op
    from fusecc.compiler.resources import resource_identity

    key = (print_op(module, digest_elements=True), resource_identity(module), vectorize)
    found = _programs.get(key)
    if found is None:
        found = _programs[key] = CompiledProgram(module, vectorize)
    return found
