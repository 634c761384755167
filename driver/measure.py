"""`fusecc report --measure`: the seed's table 1.3, measured on this machine.

The program is compiled twice for the target, through the same pipeline
as `fusecc run`: once unfused (`fuse` with every kind switched off, so each
op is a singleton group and its own kernel) and once fused. Both run on the
same seeded inputs: each runs once to check its results against the
reference interpreter (which also warms it up), then `repeat` timed runs
alternate between the two (unfused first on even rounds, fused first on
odd ones), so that drifts in machine load hit both alike; figures are
medians.

What each figure is:

* launches, copies: steps of the compiled schedule;
* bytes moved: per launch, every buffer the kernel loads from plus every
  buffer it stores to, once each (its compulsory traffic, from the loop
  IR's loads and stores; nothing here reads hardware counters, and cache
  re-reads inside a kernel are not counted); copies count source and target;
* intermediate memory: the memory plan's naive size (every intermediate
  and scratch buffer its own bytes) and its arena (what the program
  allocates, bytes shared by liveness);
* time: the median wall time of a whole run (inputs in, outputs out), and
  per step the median of the runtime's per-launch profile;
* achieved GB/s: bytes moved / step time;
* achieved GFLOP/s: the group's FLOPs (the cost model's) credited to the
  kernels that execute them (`driver/kernel_work.py`), / step time; pack
  kernels and copies compute nothing and show no rate.

The modelled figures beside them are `driver/reporting.py`'s, from the cost
model of the same target, on the very groups that were compiled.

Targets: measuring needs a runtime that can time each launch. Only the CPU
has one here (`MEASURERS`); a GPU measurer (timing each launch of
`runtime/cuda`'s `GpuProgram` with CUDA events) registers under the GPU's
hardware name with `register_measurer`.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.passes.backends.hardware import hardware
from fusecc.compiler.ir import Operation
from fusecc.compiler.pass_manager import PassContext, run_pipeline
from fusecc.compiler.types import MemRefType
from fusecc.dialects import loop
from fusecc.driver import reporting
from fusecc.driver.kernel_work import credited_flops, kernel_work
from fusecc.passes.fusion import cost_model as cm
from fusecc.passes.fusion.fuse import PHASES
from fusecc.passes.memory.plan import kernels_by_name

from fusecc.compiler.dims import active_hints, hinted_shape, shape_hints
from fusecc.driver.inputs import random_input_with_shrunk_weights
from fusecc.runtime.reference import evaluate

# Whole programs against the reference interpreter: |cpu - reference| <=
# PROGRAM_RTOL * max|reference| per result. Looser than the per-kernel
# policy of docs/cpu-target.md (4e-6): summation order differs (matmul
# tiles, partial sums), and the rounding it causes grows with the reductions.
PROGRAM_RTOL = 1e-4


class MeasurementUnavailable(Exception):
    """The target cannot be measured here; the message says why."""


class Runnable(Protocol):
    def run(self, inputs: Sequence[np.ndarray], entry: str | None = None, profile: list | None = None) -> list[np.ndarray]:
        """Run a schedule; with `profile`, append (step name, seconds) per launch or copy."""


class Measurer(Protocol):
    target: str

    def available(self) -> str | None:
        """None when programs can be timed here, else the reason."""

    def compile(self, module: Operation) -> Runnable:
        """A loop-level module, compiled for the target."""

    def describe(self) -> str:
        """The machine, for the report's header."""


class CpuMeasurer:
    target = "cpu"

    def __init__(self, threads: int | None = None):
        from fusecc.runtime.cpu.executor import WorkerPool

        self.threads = threads
        self.pool = WorkerPool(threads)

    def available(self) -> str | None:
        from fusecc.driver.cpu_target import CpuTarget

        return CpuTarget().available()

    def compile(self, module: Operation) -> Runnable:
        from fusecc.runtime.cpu.executor import CompiledProgram

        return CompiledProgram(module, pool=self.pool)

    def describe(self) -> str:
        from fusecc.runtime.cpu.executor import available_cpus

        cpus, threads = available_cpus(), self.pool.threads
        return f"this CPU ({cpus} CPU{'s' * (cpus != 1)}, {threads} thread{'s' * (threads != 1)})"


MEASURERS: dict[str, Callable[..., Measurer]] = {"cpu": CpuMeasurer}


def register_measurer(target: str, factory: Callable[..., Measurer]) -> None:
    MEASURERS[target] = factory


def measurer_for(target: str, threads: int | None = None) -> Measurer:
    factory = MEASURERS.get(target)
    if factory is None:
        kind = hardware(target).kind
        raise MeasurementUnavailable(
            f"--measure runs the program, and only the CPU target can be measured here (use --target cpu); "
            f"'{target}' is a {kind.upper()} model, and timing its launches through runtime/cuda is not part of the report yet"
        )
    measurer = factory(threads)
    problem = measurer.available()
    if problem:
        raise MeasurementUnavailable(problem)
    return measurer


# --------------------------------------------------------------------------- compiled variants


@dataclass
class Step:
    """One launch or copy of the compiled schedule."""

    name: str  # the loop.kernel's symbol, or "copy"
    kind: str  # the group's kind, or "copy"
    group: int | None
    bytes_read: int
    bytes_written: int
    executed_flops: float = 0.0  # what one launch executes (kernel_work, from its loop IR; 0 for packs and copies)
    seconds: list[float] = field(default_factory=list)  # one per timed run

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.bytes_written


@dataclass
class Variant:
    label: str  # "unfused" or "fused"
    model: dict  # reporting.report_data of the groups that were compiled
    module: Operation  # at the loop level
    program: Runnable
    steps: list[Step]
    arena_bytes: int
    naive_bytes: int
    in_place: int
    compile_seconds: float
    run_seconds: list[float] = field(default_factory=list)
    results: list[np.ndarray] = field(default_factory=list)
    dims: dict[str, int] = field(default_factory=dict)  # the schedule's `?` dims at the measured call


def _root_argument(buffer, args: dict) -> int | None:
    while isinstance(buffer.defining_op, loop.ViewOp):
        buffer = buffer.defining_op.source
    return args.get(buffer)


def accessed_arguments(kernel: loop.KernelOp) -> tuple[set[int], set[int]]:
    """Indices of the kernel arguments that some `loop.load` reads and some
    `loop.store` writes (through views)."""
    args = {arg: i for i, arg in enumerate(kernel.body.args)}
    read: set[int] = set()
    written: set[int] = set()
    for op in kernel.walk():
        if isinstance(op, (loop.LoadOp, loop.StoreOp)):
            i = _root_argument(op.buffer, args)
            if i is not None:
                (written if isinstance(op, loop.StoreOp) else read).add(i)
    return read, written


def is_dynamic_schedule(schedule: loop.ScheduleOp) -> bool:
    """Sizes of this schedule are expressions of `?` dims (as the CPU runtime decides)."""
    return schedule.is_dynamic or not isinstance(schedule.arena_size, int)


def buffer_types(schedule: loop.ScheduleOp, dims: dict[str, int] | None = None) -> dict:
    """Every memref value of the schedule -> its type at one call's `dims`
    (named dim -> size): every size known, as runtime/cpu/dynamic.py places
    the buffers. Without `dims`, the types as they are (`?` sizes stay
    expressions: a static schedule's, or a caller that wants only names)."""
    found: dict = {}
    sizes = schedule.argument_sizes()
    for i, arg in enumerate(schedule.body.args):
        if isinstance(arg.type, MemRefType):
            found[arg] = arg.type.with_sizes(loop.evaluate_size(e, dims) for e in sizes[i]) if arg.type.has_dynamic_shape and dims is not None else arg.type
    for op in schedule.body:
        for result in op.results:
            if isinstance(result.type, MemRefType):
                dynamic = dims is not None and result.type.has_dynamic_shape and isinstance(op, (loop.ViewOp, loop.ArenaViewOp))
                found[result] = loop.concrete_type(op, dims) if dynamic else result.type
    return found


def buffer_bytes(schedule: loop.ScheduleOp, dims: dict[str, int] | None = None) -> dict:
    """Every memref value of the schedule -> its bytes at one call's `dims` (`buffer_types`)."""
    return {v: t.byte_size for v, t in buffer_types(schedule, dims).items()}


def schedule_steps(schedule: loop.ScheduleOp, skip=(), dims: dict[str, int] | None = None) -> list[Step]:
    """The launches and copies of a schedule, in order, with their bytes at
    one call's `dims` (needed when the schedule has `?` dims); launches in
    `skip` (those the CPU runtime runs once at load) left out."""
    types = buffer_types(schedule, dims)
    byte_size = {v: t.byte_size for v, t in types.items()}
    kernels = kernels_by_name(schedule)
    accesses: dict[str, tuple[set[int], set[int]]] = {}
    work: dict[tuple, float] = {}
    steps = []
    for op in schedule.body:
        if isinstance(op, loop.LaunchOp) and op in skip:
            continue
        if isinstance(op, loop.LaunchOp):
            kernel = kernels[op.kernel_name]
            if op.kernel_name not in accesses:
                accesses[op.kernel_name] = accessed_arguments(kernel)
            arg_types = tuple(types.get(v, v.type) for v in op.operands)
            key = (op.kernel_name, arg_types if dims else ())
            if key not in work:
                work[key] = kernel_work(kernel, arg_types if dims else None).flops
            read, written = accesses[op.kernel_name]
            size = [byte_size.get(v, 0) for v in op.operands]
            steps.append(Step(op.kernel_name, kernel.attr("kind") or "?", kernel.attr("group"), sum(size[i] for i in read), sum(size[i] for i in written), work[key]))
        elif isinstance(op, loop.CopyOp):
            size = byte_size[op.source]
            steps.append(Step("copy", "copy", None, size, size))
    return steps


def compile_variant(program: Operation, entry: str, measurer: Measurer, fused: bool, engine: DiagnosticEngine, shapes: Sequence[tuple] | None = None) -> Variant:
    """A copy of the tensor program through the target's loop pipeline, fused
    or with one kernel per op, with the fusion report of the groups it compiled.
    `shapes`: the input shapes of the call to be measured. Its `?` dims are
    the sizes the cost model assumes (so the modelled figures describe that
    call) and the sizes the steps' bytes are counted at; without them, the
    active --shape-hint sizes (`hinted_inputs`)."""
    start = time.perf_counter()
    module = program.clone()
    target = measurer.target
    shapes = [tuple(s) for s in shapes] if shapes is not None else [tuple(getattr(t, "shape", ())) for t in _hinted_types(program.lookup(entry))]
    with shape_hints({**active_hints(), **input_dims(program.lookup(entry), shapes)}):
        model = reporting.report_data(module, target, engine, enabled=PHASES if fused else ())
        _, after_fuse = reporting.split_at_fuse("loop", target)
        run_pipeline(after_fuse, module, PassContext(diagnostics=engine, target=target))
    schedule = module.lookup(entry)
    program = measurer.compile(module)
    dims = None
    if is_dynamic_schedule(schedule):
        try:
            dims = schedule.bind_dims(shapes)
        except loop.ShapeMismatch as exc:
            raise MeasurementUnavailable(f"@{entry}: {exc}") from None
    at_load = ()
    if target == "cpu":  # packing constant weights runs once at load, not per call (runtime/cpu/load_time.py)
        from fusecc.runtime.cpu.load_time import load_time_launches

        # a `?`-shaped schedule packs at load only what does not depend on the dims (runtime/cpu/dynamic.py)
        at_load = program.prepare(entry).launches_at_load if dims is not None else load_time_launches(schedule)
    byte_size = buffer_bytes(schedule, dims)
    arena = loop.evaluate_size(schedule.arena_size, dims)
    naive = schedule.attr("plan.naive_bytes")
    if dims is not None:  # the symbolic plan records no naive size: every arena view its own bytes
        naive = sum(byte_size[op.result] for op in schedule.body if isinstance(op, loop.ArenaViewOp))
    return Variant(
        "fused" if fused else "unfused",
        model,
        module,
        program,
        schedule_steps(schedule, at_load, dims),
        arena,
        naive or arena,
        schedule.attr("plan.in_place") or 0,
        time.perf_counter() - start,
        dims=dims or {},
    )


# --------------------------------------------------------------------------- running


def _hinted_types(func: Operation) -> list:
    return [t if getattr(t, "is_static", True) else t.with_shape(hinted_shape(t.shape)) for t in func.function_type.inputs]


def model_inputs(func: Operation, seed: int) -> list[np.ndarray]:
    """Seeded inputs; `?` dims at the active --shape-hint sizes (DEFAULT_HINT
    for a dim without one; `describe_call_dims` says which)."""
    rng = np.random.default_rng(seed)
    return [random_input_with_shrunk_weights(t, rng) for t in _hinted_types(func)]


def input_dims(func: Operation, shapes: Sequence[tuple]) -> dict[str, int]:
    """The named `?` dims a call's input shapes give (dim name -> size)."""
    dims: dict[str, int] = {}
    for t, shape in zip(func.function_type.inputs, shapes):
        for d, n in zip(getattr(t, "shape", ()), shape):
            if type(d) is not int and d.is_Symbol:
                dims.setdefault(str(d), int(n))
    return dims


def describe_call_dims(dims: dict[str, int], from_inputs: bool) -> str:
    """`B=8, S=128 (from --inputs)` or `B=8 (--shape-hint), S=64 (default hint)`;
    '' for a program without `?` dims."""
    if not dims:
        return ""
    if from_inputs:
        return ", ".join(f"{n}={v}" for n, v in sorted(dims.items())) + " (from --inputs)"
    hints = active_hints()
    return ", ".join(f"{n}={v} ({'--shape-hint' if n in hints else 'default hint'})" for n, v in sorted(dims.items()))


def compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> float:
    """The worst result's max |got - want| / max |want| (inf on a shape,
    dtype or NaN-position mismatch; integers must be equal)."""
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return float("inf")
        if w.dtype.kind != "f":
            worst = max(worst, 0.0 if np.array_equal(g, w) else float("inf"))
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        if not np.array_equal(np.isnan(g64), np.isnan(w64)):
            return float("inf")
        finite = ~np.isnan(w64)
        if not finite.any():
            continue
        scale = max(float(np.max(np.abs(w64[finite]))), 1e-30)
        with np.errstate(invalid="ignore"):
            error = np.abs(g64[finite] - w64[finite])
        error = np.where(g64[finite] == w64[finite], 0.0, error)  # equal infinities
        worst = max(worst, float(np.max(error)) / scale)
    return worst


def time_variants(variants: Sequence[Variant], inputs, entry: str, repeat: int) -> None:
    """`repeat` timed runs of each variant, interleaved, order alternating."""
    collect = gc.isenabled()
    gc.collect()
    gc.disable()  # a collection inside one run would count against it alone
    try:
        for round_ in range(repeat):
            for variant in variants if round_ % 2 == 0 else variants[::-1]:
                profile: list = []
                start = time.perf_counter()
                variant.program.run(inputs, entry, profile=profile)
                variant.run_seconds.append(time.perf_counter() - start)
                names = [name for name, _ in profile]
                if names != [s.name for s in variant.steps]:
                    raise RuntimeError(f"the {variant.label} program ran steps {names}, its schedule has {[s.name for s in variant.steps]}")
                for step, (_, seconds) in zip(variant.steps, profile, strict=True):
                    step.seconds.append(seconds)
    finally:
        if collect:
            gc.enable()


def measure(program: Operation, entry: str, target: str = "cpu", repeat: int = 10, seed: int = 0, threads: int | None = None, engine: DiagnosticEngine | None = None) -> dict:
    """The measured report of a verified tensor program's `entry` function
    (see the module doc); `program` itself is left as it is."""
    engine = engine or DiagnosticEngine()
    measurer = measurer_for(target, threads)
    func = program.lookup(entry)
    inputs = model_inputs(func, seed)
    shapes = [np.shape(a) for a in inputs]
    variants = [compile_variant(program, entry, measurer, fused, engine, shapes) for fused in (False, True)]
    with np.errstate(all="ignore"):
        want = evaluate(program, entry, inputs)
    for variant in variants:
        variant.results = variant.program.run(inputs, entry)  # also the warm-up
    time_variants(variants, inputs, entry, repeat)
    unfused, fused = variants
    return {
        "target": fused.model["target"],
        "arch": fused.model["arch"],
        "machine": measurer.describe(),
        "entry": entry,
        "repeat": repeat,
        "seed": seed,
        # the `?` dims of the measured call (and of the modelled figures): the --shape-hint sizes
        "dims": input_dims(func, shapes),
        "dims_described": describe_call_dims(input_dims(func, shapes), False),
        "tolerance": PROGRAM_RTOL,
        "model": {"before": fused.model["before"], "after": fused.model["after"]},
        "measured": {v.label: variant_data(v, compare(v.results, want)) for v in variants},
        "unfused": fused.model["unfused"],
    }


def variant_data(variant: Variant, error: float) -> dict:
    medians = [statistics.median(s.seconds) if s.seconds else 0.0 for s in variant.steps]
    in_steps = sum(medians)
    groups = {g["id"]: g for g in variant.model["groups"]}
    credited = credited_flops(variant.steps, {gid: g["flops"] for gid, g in groups.items()})
    kernels, modelled = [], set()
    for step, seconds, flops in zip(variant.steps, medians, credited, strict=True):
        group = groups.get(step.group)
        first_of_group = group is not None and step.group not in modelled
        modelled.add(step.group)
        kernels.append(
            {
                "name": step.name,
                "kind": step.kind,
                "group": step.group,
                "seconds": seconds,
                "share": seconds / in_steps if in_steps else 0.0,
                "bytes_read": step.bytes_read,
                "bytes_written": step.bytes_written,
                "gb_per_second": step.bytes_moved / seconds / 1e9 if seconds else 0.0,
                # the group's FLOPs credited to the kernels that execute them (driver/kernel_work.py):
                # a pack kernel or a copy has none
                "flops": flops,
                "executed_flops": step.executed_flops,
                "gflop_per_second": flops / seconds / 1e9 if flops and seconds else None,
                # the cost model's figures for the group, on its first launch
                "modelled_seconds": group["time_seconds"] if first_of_group else None,
                "modelled_bytes": group["bytes_moved"] if first_of_group else None,
                "modelled_flops": group["flops"] if first_of_group else None,
                "ops": group["ops"] if group else [],
                "names": group["names"] if group else [],
            }
        )
    return {
        "launches": sum(s.name != "copy" for s in variant.steps),
        "copies": sum(s.name == "copy" for s in variant.steps),
        "groups": len(variant.model["groups"]),
        "bytes_moved": sum(s.bytes_moved for s in variant.steps),
        "naive_bytes": variant.naive_bytes,
        "arena_bytes": variant.arena_bytes,
        "in_place": variant.in_place,
        "time_seconds": statistics.median(variant.run_seconds) if variant.run_seconds else 0.0,
        "run_seconds": variant.run_seconds,
        "step_seconds": in_steps,
        "compile_seconds": variant.compile_seconds,
        "max_error": error,
        "agrees": error <= PROGRAM_RTOL,
        "kernels": kernels,
    }


# --------------------------------------------------------------------------- text


def _change(before: float, after: float, better: str, worse: str) -> str:
    return "same" if before == after else reporting.ratio(before, after, better, worse)


def _row(label: str, cells: Sequence[str], change: str = "") -> str:
    return f"  {label:<22}" + "".join(f"{c:>11}" for c in cells) + f"   {change}".rstrip()


def format_measured_report(data: dict, all_kernels: bool = False) -> str:
    mb, ma = data["model"]["before"], data["model"]["after"]
    u, f = data["measured"]["unfused"], data["measured"]["fused"]
    B, T = cm.format_bytes, cm.format_time
    lines = [
        f"fusion report for {data['target']} ({data['arch']}): the cost model, and the compiled program measured on {data['machine']}",
        f"median of {data['repeat']} interleaved runs of @{data['entry']} on seeded inputs (seed {data['seed']})"
        + (f", dynamic dims at {data['dims_described']}" if data.get("dims_described") else ""),
        "",
        f"  {'':<22}{'cost model':>22}{'measured':>22}",
        _row("", ["unfused", "fused", "unfused", "fused"], "change (measured)"),
        _row("kernel launches", [str(mb["kernels"]), str(ma["kernels"]), str(u["launches"]), str(f["launches"])], _change(u["launches"], f["launches"], "fewer", "more")),
        _row("bytes moved", [B(mb["bytes_moved"]), B(ma["bytes_moved"]), B(u["bytes_moved"]), B(f["bytes_moved"])], _change(u["bytes_moved"], f["bytes_moved"], "less", "more")),
        _row("intermediate memory", [B(mb["intermediate_bytes"]), B(ma["intermediate_bytes"]), B(u["naive_bytes"]), B(f["naive_bytes"])], _change(u["naive_bytes"], f["naive_bytes"], "less", "more")),
        _row("  planned arena", ["", "", B(u["arena_bytes"]), B(f["arena_bytes"])], _change(u["arena_bytes"], f["arena_bytes"], "less", "more")),
        _row("time", [T(mb["time_seconds"]), T(ma["time_seconds"]), T(u["time_seconds"]), T(f["time_seconds"])], _change(u["time_seconds"], f["time_seconds"], "faster", "slower")),
        _row("  in kernels", ["", "", T(u["step_seconds"]), T(f["step_seconds"])]),
    ]
    if u["copies"] or f["copies"]:
        lines.insert(6, _row("  copies", ["", "", str(u["copies"]), str(f["copies"])]))
    lines += [
        "",
        "  bytes moved: modelled from the fusion groups by the cost model; measured column from the loop kernels:",
        "    each buffer a launch loads from or stores to, once (compulsory traffic, not hardware counters)",
        "  intermediate memory: modelled, intermediate tensors written to memory; measured, the naive plan",
        "    (each intermediate and scratch buffer its own bytes) and the planned arena the program allocates",
        "",
    ]
    tolerance = data["tolerance"]
    lines.append(
        f"numerics: max |{data['target']} - reference| / max |reference| = {u['max_error']:.1e} unfused, {f['max_error']:.1e} fused "
        f"(tolerance {tolerance:.0e}): {'both agree' if u['agrees'] and f['agrees'] else 'DISAGREE'}"
    )
    lines.append(f"compile: {u['compile_seconds']:.2f} s unfused, {f['compile_seconds']:.2f} s fused (passes and backend; cached kernels load faster)")
    lines += ["", *_kernel_table("kernels (fused)", f)]
    if all_kernels:
        lines += ["", *_kernel_table("kernels (unfused)", u)]
    lines += ["", *reporting.format_unfused_chains(data["unfused"])]
    return "\n".join(lines) + "\n"


def _kernel_table(title: str, variant: dict) -> list[str]:
    lines = [f"{title}:", f"  {'kernel':<22}{'kind':<12}{'time':>10}{'share':>8}{'model':>10}{'bytes':>10}{'GB/s':>7}{'GFLOP/s':>9}  ops"]
    for k in variant["kernels"]:
        model = cm.format_time(k["modelled_seconds"]) if k["modelled_seconds"] is not None else ""
        gflops = f"{k['gflop_per_second']:.1f}" if k["gflop_per_second"] is not None else ""
        ops = reporting.describe_ops(k) if k["ops"] else ""
        lines.append(
            f"  {k['name']:<22}{k['kind']:<12}{cm.format_time(k['seconds']):>10}{k['share'] * 100:>7.1f}%{model:>10}"
            f"{cm.format_bytes(k['bytes_read'] + k['bytes_written']):>10}{k['gb_per_second']:>7.1f}{gflops:>9}  {ops}"
        )
    return lines


__all__ = ["MEASURERS", "PROGRAM_RTOL", "MeasurementUnavailable", "accessed_arguments", "buffer_bytes", "compile_variant", "describe_call_dims", "input_dims", "is_dynamic_schedule", "model_inputs", "format_measured_report", "measure", "measurer_for", "register_measurer", "schedule_steps"]
