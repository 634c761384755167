"""`fusecc bisect`: where a target's numbers leave the reference's, as a group, a pass and a reproducer.

Given a tensor program, its inputs and a target (cpu, or cuda-sim: the CUDA
C run on this CPU), bisect runs the target's pipeline (`pipelines.py`, with
any passes a test inserts) and compares the results with the reference
interpreter's (`measure.compare`: max |got - want| / max |want| <= rtol).
When they disagree:

1. **Before fusion.** The passes up to and including `fuse` keep the
   tensor level, so after each one the whole program runs on the reference
   interpreter; the first pass that changes its results is the culprit.
2. **The group.** The fused program runs on the reference interpreter,
   keeping every value (the reference intermediates). Each fusion group,
   in program order, becomes a program of its own (a function holding the
   `fusion.group` op, id kept), goes through the passes after `fuse` and runs
   on the target with the reference values of its operands; the first
   group whose results leave the reference values of its results is the one.
3. **The pass.** That group alone goes through the passes after `fuse`
   one at a time; after each, its numbers are computed at the level the IR
   is at: the reference interpreter at the tensor level, the loop
   interpreter (runtime/loop_interpreter.py, exact but slow: skipped above
   `MAX_INTERPRETED_FLOPS`) at the loop level, then the target itself
   ("emit": LLVM on the CPU, CUDA C on the harness). The first stage whose
   numbers leave the reference is the culprit.
4. **The reproducer.** The group's ops as a plain tensor function `@main`,
   its operands as arguments (the npz holds their reference values), and
   whether that program alone fails on the target.

If every group agrees alone but the program does not, the fault is between
kernels (memory planning, aliasing); bisect says so and the reproducer is
the whole program.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.compiler.ir import Operation
from fusecc.compiler.parser import parse_module
from fusecc.compiler.pass_manager import PassContext, PassManager, parse_pipeline, run_pipeline
from fusecc.compiler.printer import print_op
from fusecc.compiler.types import FunctionType
from fusecc.dialects import func as F
from fusecc.driver.kernel_work import kernel_work
from fusecc.driver.measured_call import PROGRAM_RTOL, compare, input_dims
from fusecc.driver.pipelines import is_loop_level, pipeline_for_level
from fusecc.driver.specialise import specialise
from fusecc.passes.fusion.fuse import Fuse
from fusecc.runtime.reference import Interpreter, evaluate

MAX_INTERPRETED_FLOPS = 3e6  # the loop interpreter runs ~1e5 scalar ops a second
GPU_ARCH = {"h200": "sm_90", "a100": "sm_80"}

Runner = Callable[[Operation, str, Sequence[np.ndarray]], list[np.ndarray]]


@dataclass
class Stage:
    name: str  # the pass's name, or "emit"
    text: str  # the pass with its options, as in a pipeline
    level: str  # tensor, loop or target: where its numbers were computed
    error: float | None  # None: not checked (see note)
    note: str = ""


@dataclass
class BisectResult:
    target: str
    rtol: float
    error: float  # the whole program's
    groups: list[dict] = field(default_factory=list)  # id, kind, error, in program order up to the culprit
    group: dict | None = None  # the first diverging group
    stages: list[Stage] = field(default_factory=list)
    culprit: str | None = None  # the first pass whose numbers diverge
    reproducer: str | None = None  # .ir text
    reproducer_inputs: dict[str, np.ndarray] = field(default_factory=dict)
    reproducer_fails: bool | None = None
    summary: str = ""

    @property
    def agrees(self) -> bool:
        return self.error <= self.rtol


# --------------------------------------------------------------------------- pipeline


def pipeline_entries(target: str, gpu: str | None, insert: Sequence[tuple[str, str]] = ()) -> tuple[str, list]:
    """The target's compile pipeline as a list of passes, with `insert`ed
    ones: (after which pass, pass text), e.g. ("tile", "test-inject-fault{group=1}")."""
    if target == "cpu":
        text = pipeline_for_level("loop", target="cpu")
    else:
        gpu = gpu or "h200"
        text = pipeline_for_level("cuda", target=gpu, arch=GPU_ARCH[gpu])
    manager = parse_pipeline(text)
    entries = list(manager.entries)
    for after, pass_text in insert:
        at = next((i for i, e in enumerate(entries) if e.name == after), None)
        if at is None:
            raise ValueError(f"cannot insert '{pass_text}' after '{after}': the {target} pipeline has {', '.join(e.name for e in entries)}")
        entries[at + 1 : at + 1] = parse_pipeline(pass_text).entries
    return manager.anchor, entries


def run_passes(anchor: str, entries: Sequence, module: Operation, context: PassContext) -> None:
    if entries:
        run_pipeline(PassManager(anchor, list(entries)), module, context)


def target_runner(target: str, gpu: str | None) -> Runner:
    """Compiles a loop-level module for the target and runs a schedule."""
    if target == "cpu":
        from fusecc.runtime.cpu.executor import CompiledProgram

        return lambda module, entry, inputs: CompiledProgram(module).run(inputs, entry)
    from fusecc.driver.gpu_measure import CudaSimMeasurer

    measurer = CudaSimMeasurer(gpu or "h200")
    return lambda module, entry, inputs: measurer.compile(module).run(inputs, entry)


# --------------------------------------------------------------------------- groups as programs


class _Recorder(Interpreter):
    """The reference interpreter, keeping the values of the entry's body."""

    env: dict | None = None

    def run_block(self, block, args):
        env = dict(zip(block.args, args))
        if self.env is None:
            self.env = env
        return self.run_ops(block, env)


def _identifier(name: str | None, index: int, taken: set) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", name or "") or f"arg{index}"
    if base[0].isdigit():
        base = "v" + base
    candidate, n = base, 1
    while candidate in taken:
        candidate, n = f"{base}_{n}", n + 1
    taken.add(candidate)
    return candidate


def _name_of(value) -> str | None:
    """A value's name, or for a group's result the name of what it yields."""
    if value.name_hint:
        return value.name_hint
    op = value.defining_op if hasattr(value, "defining_op") else None
    if op is not None and op.name == "fusion.group":
        return op.regions[0].block.last_op.operands[value.index].name_hint
    return None


def _wrap(name: str, operands, result_types, fill: Callable[[Operation, list], list]) -> Operation:
    """A module with one function `@name` taking `operands`' types (named
    after them) and returning what `fill(func, arguments)` returns."""
    module = parse_module("module {\n}\n", "<bisect>")
    taken: set = set()
    names = [_identifier(_name_of(v), i, taken) for i, v in enumerate(operands)]
    function = F.FuncOp.build(name, FunctionType([v.type for v in operands], list(result_types)), names)
    module.body.append(function)
    results = fill(function, list(function.body.args))
    function.body.append(F.ReturnOp(results, []))
    return module


def group_program(group: Operation, name: str) -> Operation:
    """The `fusion.group` op alone (id kept), as a function of its operands."""

    def fill(function, args):
        clone = group.clone(dict(zip(group.operands, args)))
        function.body.append(clone)
        return list(clone.results)

    return _wrap(name, group.operands, [r.type for r in group.results], fill)


def group_source(group: Operation) -> Operation:
    """The group's ops as a plain tensor function @main: the reproducer."""
    body = group.regions[0].block

    def fill(function, args):
        mapping = dict(zip(body.args, args))
        for op in body:
            if op is body.last_op:
                return [mapping.get(v, v) for v in op.operands]
            function.body.append(op.clone(mapping))
        return []

    return _wrap("main", group.operands, [r.type for r in group.results], fill)


# --------------------------------------------------------------------------- the stages of one group


def _numbers_at(module: Operation, entry: str, inputs) -> tuple[list[np.ndarray] | None, str, str]:
    """(results or None, level, note) of a module at whatever level it is."""
    if not is_loop_level(module):
        with np.errstate(all="ignore"):
            return evaluate(module, entry, inputs), "tensor", ""
    from fusecc.dialects import loop
    from fusecc.runtime.loop_interpreter import LoopInterpreter

    work = sum(kernel_work(k).flops for k in module.body if isinstance(k, loop.KernelOp))
    if work > MAX_INTERPRETED_FLOPS:
        return None, "loop", f"not checked: {work:.3g} FLOPs is too much for the loop interpreter (the emit stage checks it)"
    try:
        with np.errstate(all="ignore"):
            return LoopInterpreter(module).run_schedule(entry, inputs), "loop", ""
    except Exception as exc:  # an IR the interpreter cannot run before a later pass (not a verdict)
        return None, "loop", f"not checked: the loop interpreter cannot run it here ({exc})"


def pass_stages(program: Operation, entry: str, anchor: str, entries: Sequence, inputs, want, rtol: float, run: Runner, context: PassContext) -> tuple[list[Stage], str | None]:
    """Apply `entries` one at a time to `program` (changed in place); after
    each, compare the numbers with `want`; then run it on the target."""
    stages: list[Stage] = []
    for entry_pass in entries:
        run_passes(anchor, [entry_pass], program, context)
        got, level, note = _numbers_at(program, entry, inputs)
        error = compare(got, want) if got is not None else None
        stages.append(Stage(entry_pass.name, str(entry_pass), level, error, note))
        if error is not None and error > rtol:
            return stages, entry_pass.name
    with np.errstate(all="ignore"):
        error = compare(run(program, entry, inputs), want)
    stages.append(Stage("emit", "emit", "target", error))
    return stages, ("emit" if error > rtol else None)


# --------------------------------------------------------------------------- bisect


def bisect(module: Operation, entry: str, inputs: Sequence[np.ndarray], target: str = "cpu", gpu: str | None = None, rtol: float = PROGRAM_RTOL, insert: Sequence[tuple[str, str]] = (), engine: DiagnosticEngine | None = None, log: Callable[[str], None] = lambda s: None) -> BisectResult:
    """See the module doc. `module` is left as it is."""
    engine = engine or DiagnosticEngine()
    hardware = "cpu" if target == "cpu" else (gpu or "h200")
    context = PassContext(diagnostics=engine, target=hardware)
    anchor, entries = pipeline_entries(target, gpu, insert)
    run = target_runner(target, gpu)
    with np.errstate(all="ignore"):
        want = evaluate(module, entry, inputs)
    log(f"compiling the whole program for {target}")
    whole = module.clone()
    run_passes(anchor, entries, whole, context)
    with np.errstate(all="ignore"):
        result = BisectResult(target, rtol, compare(run(whole, entry, inputs), want))
    if result.agrees:
        result.summary = f"{target} agrees with the reference (max relative error {result.error:.1e} <= {rtol:.0e}); nothing to bisect"
        return result

    # 1. up to fusion, on the whole program
    fuse_at = max(i for i, e in enumerate(entries) if isinstance(e, Fuse))  # the groups are the last fuse's
    program = module.clone()
    stages, culprit = pass_stages(program, entry, anchor, entries[: fuse_at + 1], inputs, want, rtol, lambda *a: want, context)
    stages.pop()  # its "emit" is not a stage here
    result.stages = stages
    if culprit is not None:
        result.culprit = culprit
        result.reproducer = print_op(module)
        result.reproducer_inputs = _named_inputs(module.lookup(entry), inputs)
        result.summary = f"the whole program's numbers change at pass '{culprit}', before fusion: the reproducer is the program itself"
        return result

    # 2. the first group that diverges alone, on the reference intermediates
    recorder = _Recorder(program)
    with np.errstate(all="ignore"):
        recorder.call(entry, inputs)
    env = recorder.env
    groups = [op for op in program.lookup(entry).body if op.name == "fusion.group"]
    for group in groups:
        gid = group.attr("id")
        ins, outs = [env[v] for v in group.operands], [env[r] for r in group.results]
        name = f"group_{gid}"
        log(f"group {gid} ({group.attr('kind')}) alone on {target}")
        alone = group_program(group, name)
        run_passes(anchor, entries[fuse_at + 1 :], alone, context)
        with np.errstate(all="ignore"):
            error = compare(run(alone, name, ins), outs)
        result.groups.append({"id": gid, "kind": group.attr("kind"), "error": error, "ops": _ops_of(group)})
        if error > rtol:
            result.group = result.groups[-1]
            break
    if result.group is None:
        result.summary = (
            f"every fusion group agrees with the reference alone, but the program does not (max relative error {result.error:.1e}): "
            "the fault is between kernels (memory planning, buffers shared across launches); the reproducer is the whole program"
        )
        result.reproducer = print_op(module)
        result.reproducer_inputs = _named_inputs(module.lookup(entry), inputs)
        return result

    # 3. the first pass at which that group's numbers change
    name = f"group_{gid}"
    log(f"passes on group {gid}")
    stages, culprit = pass_stages(group_program(group, name), name, anchor, entries[fuse_at + 1 :], ins, outs, rtol, run, context)
    result.stages += stages
    result.culprit = culprit

    # 4. the reproducer
    source = group_source(group)
    # a group's operands carry dims such as 4*B that its own arguments cannot
    # name (`fusecc.dims` names bare dims): the reproducer is written at the
    # sizes of the call that showed the fault
    dims = input_dims(module.lookup(entry), [np.shape(a) for a in inputs])
    specialise(source, dims)
    at = f" at {', '.join(f'{n}={v}' for n, v in sorted(dims.items()))}" if dims else ""
    result.reproducer = f"// fusecc bisect: fusion group {gid} ({group.attr('kind')}) of @{entry}{at}, whose results leave the reference on {target}\n" + print_op(source)
    result.reproducer_inputs = _named_inputs(source.lookup("main"), ins)
    try:
        alone = parse_module(result.reproducer, "reproducer.ir")
        with np.errstate(all="ignore"):
            want_alone = evaluate(alone, "main", ins)
        run_passes(anchor, entries, alone, context)
        with np.errstate(all="ignore"):
            result.reproducer_fails = compare(run(alone, "main", ins), want_alone) > rtol
    except Exception as exc:  # reported, not fatal: the group and pass are found
        result.reproducer_fails = None
        log(f"the reproducer could not be checked: {exc}")
    where = f"at pass '{culprit}'" if culprit else "at no single pass (each stage agrees)"
    result.summary = f"fusion group {gid} ({group.attr('kind')}) is the first to leave the reference; its numbers change {where}"
    return result


def _ops_of(group: Operation) -> list[str]:
    from fusecc.driver.reporting import source_location

    body = group.regions[0].block
    out = []
    for op in body:
        if op is body.last_op or op.name == "tensor.constant":
            continue
        where = source_location(op.location)
        out.append(f"{op.name}" + (f" ({where})" if where else ""))
    return out


def _named_inputs(function: Operation, inputs) -> dict[str, np.ndarray]:
    return {(arg.name_hint or f"arg{i}"): np.asarray(x) for i, (arg, x) in enumerate(zip(function.body.args, inputs))}


def format_result(result: BisectResult) -> str:
    lines = [result.summary]
    if result.agrees:
        return lines[0] + "\n"
    lines.append(f"  whole program on {result.target}: max relative error {result.error:.1e} (rtol {result.rtol:.0e})")
    if result.groups:
        lines.append("  groups, alone on the reference intermediates:")
        for g in result.groups:
            mark = "DIVERGES" if g["error"] > result.rtol else "agrees"
            lines.append(f"    group {g['id']:<3} {g['kind']:<12} {g['error']:.1e}  {mark}")
        if result.group:
            lines.append(f"  group {result.group['id']} holds: {', '.join(result.group['ops'])}")
    if result.stages:
        lines.append("  passes:")
        for s in result.stages:
            figure = f"{s.error:.1e}" if s.error is not None else "-"
            mark = "" if s.error is None else ("  <- first change" if s.name == result.culprit else "")
            lines.append(f"    {s.text if len(s.text) <= 28 else s.name:<28} {s.level:<7} {figure:>8}{mark}" + (f"  ({s.note})" if s.note else ""))
    if result.reproducer_fails is not None:
        lines.append(
            f"  the reproducer alone, through the same pipeline (inserted passes included), {'fails' if result.reproducer_fails else 'does NOT fail'} on {result.target}"
            + ("" if result.reproducer_fails else " (the fault needs the rest of the program, or an inserted pass names a group id the reproducer lacks)")
        )
    return "\n".join(lines) + "\n"


__all__ = ["BisectResult", "MAX_INTERPRETED_FLOPS", "Stage", "bisect", "format_result", "group_program", "group_source", "pipeline_entries"]
