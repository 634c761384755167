"""fusecc as a PyTorch backend: `torch.compile(model, backend="fusecc")`.

    compiled = torch.compile(model, backend="fusecc")   # or backend=fusecc.torch.backend
    y = compiled(x)
    print(fusecc.torch.explain())                       # what ran on fusecc, what fell back and why

Dynamo hands each captured graph to `backend`, which runs AOT autograd with
the core aten decompositions (inference only) and gives the forward graph
to fusecc's torch front end (fusecc.frontends.torch). A graph whose ops all
translate is compiled with `fusecc.compile` on the CPU target; tensors
cross without copies where the layout allows (contiguous CPU tensors of a
dtype numpy has). In a graph with an op fusecc cannot translate, the
islands of translatable ops are compiled and the rest runs in eager
(frontends/torch/partition.py); the reason is logged once per op type on
the `fusecc.torch` logger and kept for `explain()` / `stats()`.

`from_torch(module, example_inputs)` goes through `torch.export` instead:
weights become named constants, so `fusecc.save_module(m, "model.ir")`
writes them to model.safetensors as resources.

Symbolic sizes (what Dynamo makes after a shape change, or with
dynamic=True) become the IR's `?` dims: one program for every size.
Weights are frozen into the program when the graph is compiled with
autograd off, guarded per call (docs/torch.md).
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

log = logging.getLogger("fusecc.torch")


@dataclass
class _Record:
    whole: int = 0  # graphs compiled whole
    split: int = 0  # graphs split: translatable islands compiled, the rest in eager
    islands: int = 0  # islands compiled, in the split graphs
    eager: int = 0  # graphs wholly in eager
    kernels: int = 0  # kernel launches per call, summed over what was compiled
    frozen: int = 0  # weights compiled in as constants (options={"freeze": True})
    refrozen: int = 0  # graphs compiled again because a frozen weight changed
    reasons: dict[str, str] = field(default_factory=dict)  # op type -> why, first occurrence
    where: dict[str, str] = field(default_factory=dict)  # op type -> the user's line
    counts: Counter = field(default_factory=Counter)  # op type -> graphs it kept (partly) in eager


_record = _Record()


def reset() -> None:
    """Forget what explain() reports (and log the reasons again)."""
    global _record
    _record = _Record()


def stats() -> dict[str, int]:
    """explain()'s numbers: whole, split, islands, eager, kernels, frozen, refrozen."""
    r = _record
    return {"whole": r.whole, "split": r.split, "islands": r.islands, "eager": r.eager, "kernels": r.kernels, "frozen": r.frozen,
            "refrozen": r.refrozen}


def explain() -> str:
    """What the backend did since the last reset(): graphs compiled whole,
    split (islands compiled, the rest in eager) or left in eager, and for
    each op type that stayed in eager the first reason and place."""
    r = _record
    lines = [f"fusecc torch backend: {r.whole} graph{'s' * (r.whole != 1)} compiled whole, {r.split} split "
             f"({r.islands} island{'s' * (r.islands != 1)} compiled, the rest in eager), {r.eager} in eager; "
             f"{r.kernels} kernel launches per call, {r.frozen} weights frozen" + (f", {r.refrozen} recompiled after a frozen weight changed" if r.refrozen else "")]
    for op, reason in r.reasons.items():
        lines.append(f"  {op}: {reason} ({r.counts[op]} graph{'s' * (r.counts[op] != 1)}; first at {r.where[op]})")
    return "\n".join(lines)


def _note(problems) -> None:
    """Keep each reason; log it the first time its op type is seen. One
    graph counts once per op type (its islands may meet the reason again)."""
    unique: dict[str, object] = {}
    for problem in problems:
        unique.setdefault(problem.op, problem)
    for problem in unique.values():
        _record.counts[problem.op] += 1
        if problem.op in _record.reasons:
            continue
        where = _place(problem.location)
        _record.reasons[problem.op] = problem.reason
        _record.where[problem.op] = where
        log.warning("fusecc: %s runs in eager: %s (%s)", problem.op, problem.reason, where)


def _place(location) -> str:
    position = location.file_line_col() if location is not None else None
    return f"{position.file}:{position.line}:{position.col}" if position else "unknown place"


# --------------------------------------------------------------------------- tensors across


def to_array(t: torch.Tensor) -> np.ndarray:
    """The tensor's memory as an array: no copy for a contiguous CPU tensor.
    bfloat16 becomes the float32 array of its values, which is how fusecc's
    runtime takes bf16 (a copy)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.contiguous().numpy()  # contiguous() is the tensor itself when it already is


def _runner(program, devices, kept: list[int], result_dtypes: list, guard: "_FreezeGuard | None"):
    device = devices[0] if devices else torch.device("cpu")
    direct = _DirectCall.of(program, result_dtypes) if device.type == "cpu" else None

    def run(*args):
        nonlocal program, direct
        if guard is not None and guard.changed(args):
            program = guard.refreeze(args)
            direct = _DirectCall.of(program, result_dtypes) if device.type == "cpu" else None
        args = [args[i] for i in kept]  # frozen weights are in the program already
        if direct is not None:
            outs = direct(args)
            if outs is not None:
                return outs
        results = program(*[to_array(a) if isinstance(a, torch.Tensor) else np.asarray(a) for a in args])
        outs = [torch.from_numpy(np.asarray(r)) for r in results.values()]  # fresh arrays per call: shared, not copied
        outs = [o.to(dtype) if dtype == torch.bfloat16 else o for o, dtype in zip(outs, result_dtypes)]  # bf16 comes back as f32 values
        return [o.to(device) if device.type != "cpu" else o for o in outs]

    return run


# fusecc element type -> the torch dtype whose memory is its storage layout (bf16: the same 16-bit patterns)
_STORAGE_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i64": torch.int64, "i32": torch.int32,
                   "i8": torch.int8, "i1": torch.bool}


class _DirectCall:
    """A static CPU program run on the tensors' own memory: their data
    pointers go to the executor (SchedulePlan.call) with no arrays made and
    no Program.__call__, whose checks are made here against the schedule's
    types; outputs are fresh arrays shared with torch. Per-call Python
    overhead, issues 11.2 and 15.4. `__call__` returns None where a tensor
    does not fit (dtype, shape, layout, device): the general path takes it."""

    def __init__(self, plan, inputs: list[tuple], outputs: list, output_arrays):
        """inputs: (shape, torch dtype) each; outputs: torch.bfloat16 where
        the storage array is reinterpreted as bf16, else None."""
        self.plan, self.inputs, self.outputs, self.output_arrays = plan, inputs, outputs, output_arrays

    @staticmethod
    def of(program, result_dtypes: list) -> "_DirectCall | None":
        """For a program on fusecc's CPU target whose schedule is static,
        writes no input, and takes and gives dtypes torch shares; else None."""
        from fusecc.runtime.cpu.buffers import output_arrays
        from fusecc.runtime.cpu.executor import CompiledProgram, SchedulePlan

        compiled = getattr(program, "_compiled", None)
        if program.target != "cpu" or not isinstance(compiled, CompiledProgram):
            return None
        plan = compiled.prepare(program.entry)
        if not isinstance(plan, SchedulePlan) or plan.inputs_written:
            return None
        layout = plan.layout
        inputs = [(tuple(t.shape), _STORAGE_DTYPES.get(t.element_type.name)) for t in layout.input_types]
        outputs = [_STORAGE_DTYPES.get(t.element_type.name) for t in layout.output_types]
        if None in outputs or any(dtype is None for _, dtype in inputs) or outputs != list(result_dtypes):
            return None
        return _DirectCall(plan, inputs, [dtype if dtype is torch.bfloat16 else None for dtype in outputs], output_arrays)

    def __call__(self, tensors: list):
        if len(tensors) != len(self.inputs):
            return None
        addresses = []
        for t, (shape, dtype) in zip(tensors, self.inputs):
            if not isinstance(t, torch.Tensor) or t.dtype is not dtype or t.shape != shape or not t.is_cpu or not t.is_contiguous():
                return None
            addresses.append(t.data_ptr())
        arrays, pointers = self.output_arrays(self.plan.layout.output_types)
        self.plan.call(addresses, pointers)  # the tensors stay alive (the caller holds them) until it returns
        outs = [torch.from_numpy(a) for a in arrays]
        return [o.view(bf16) if bf16 is not None else o for o, bf16 in zip(outs, self.outputs)]


def _result_dtypes(graph_module) -> list:
    output = next(n for n in graph_module.graph.nodes if n.op == "output")
    results = output.args[0] if isinstance(output.args[0], (tuple, list)) else [output.args[0]]
    vals = [r.meta.get("val") if isinstance(r, torch.fx.Node) else r for r in results]
    return [v.dtype if isinstance(v, torch.Tensor) else None for v in vals]


def _target(example_inputs) -> str:
    if any(isinstance(t, torch.Tensor) and t.device.type == "cuda" for t in example_inputs):
        from fusecc.driver import targets

        try:
            targets.get("cuda")
            return "cuda"
        except Exception:  # no GPU runtime for fusecc: run on the CPU, copying across
            return "cpu"
    return "cpu"


# --------------------------------------------------------------------------- the backend


@dataclass
class _Frozen:
    """Dynamo's inputs to compile in as constants: their positions and values."""

    inputs: int  # how many inputs Dynamo's graph takes
    arrays: dict[int, np.ndarray] = field(default_factory=dict)
    stamps: dict[int, tuple] = field(default_factory=dict)  # position -> _stamp() when frozen


def _stamp(t: torch.Tensor) -> tuple:
    """What changes when a tensor's values may have: its storage (a weight
    replaced) and its version counter (bumped by every in-place change)."""
    return (t.data_ptr(), t._version)


class _FreezeGuard:
    """The frozen inputs of one compiled graph: `changed(args)` says whether
    any was changed in place or replaced since it was frozen; `refreeze(args)`
    compiles the graph again with the new values and returns the program."""

    def __init__(self, positions: dict[str, int], stamps: dict[str, tuple], build):
        self.positions, self.stamps, self.build = positions, stamps, build

    def changed(self, args) -> bool:
        return any(_stamp(args[i]) != self.stamps[name] for name, i in self.positions.items())

    def refreeze(self, args):
        _record.refrozen += 1
        if _record.refrozen == 1:
            log.warning("fusecc: frozen weights changed (in place or replaced): compiling again with the new values; "
                        "for weights that change often, use options={'freeze': False}")
        self.stamps = {name: _stamp(args[i]) for name, i in self.positions.items()}
        return self.build({name: _frozen_array(args[i]) for name, i in self.positions.items()})


def _compile_forward(graph_module: torch.fx.GraphModule, example_inputs, frozen: _Frozen | None, threads: int):
    """AOT autograd's forward graph -> a boxed callable: compiled whole when
    every node translates, else split into compiled islands and eager nodes
    (frontends/torch/partition.py); wholly eager for inputs fusecc cannot take.
    `frozen`: positions of Dynamo's inputs to freeze as constants (weights);
    `threads`: the CPU threads of each compiled program."""
    from functorch.compile import make_boxed_func

    from fusecc.frontends.torch import input_problems, split_translatable, unsupported_nodes

    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    constants = _frozen_placeholders(placeholders, frozen)
    devices = [t.device for t in example_inputs if isinstance(t, torch.Tensor)]
    target = _target(example_inputs)
    problems = input_problems(graph_module.graph)
    if problems:
        _note(problems)
        _record.eager += 1
        return make_boxed_func(graph_module.forward)
    problems = unsupported_nodes(graph_module.graph, constants)
    if not problems:
        run = _compile_graph(graph_module, constants, devices, target, problems, threads)
        if run is not None:
            _record.whole += 1
            return make_boxed_func(run)
    split, islands = split_translatable(graph_module, constants)
    compiled = 0
    for name in islands:
        island = getattr(split, name)
        run = _compile_graph(island, constants, devices, target, problems, threads)
        if run is not None:
            setattr(split, name, _Island(run, _returns_tuple(island)))
            compiled += 1
    _note(problems)
    if compiled:
        _record.split += 1
        _record.islands += compiled
    else:
        _record.eager += 1
    return make_boxed_func(split.forward)


class _Island(torch.nn.Module):
    """A compiled island standing where its submodule was (a call_module target)."""

    def __init__(self, run, returns_tuple: bool):
        super().__init__()
        self.run, self.returns_tuple = run, returns_tuple

    def forward(self, *args):
        outs = self.run(*args)
        return tuple(outs) if self.returns_tuple else outs[0]


def _returns_tuple(graph_module) -> bool:
    output = next(n for n in graph_module.graph.nodes if n.op == "output")
    return isinstance(output.args[0], (tuple, list))


def _compile_graph(graph_module, frozen_constants: dict[str, "_FrozenValue"], devices, target: str, problems: list, threads: int):
    """A callable running the graph on fusecc, or None (the reason appended to `problems`)."""
    from fusecc.compiler.diagnostics import DiagnosticError, UsageError
    from fusecc.driver.program import Program
    from fusecc.frontends.torch import Unsupported, import_graph, is_size_input

    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    constants = {n.name: frozen_constants[n.name] for n in placeholders if n.name in frozen_constants}

    def build(arrays: dict[str, np.ndarray]):
        imported = import_graph(graph_module, constants=arrays)
        return Program(imported.module, target=target, options={"lossy": "error", "threads": threads})

    try:
        program = build({name: value.array for name, value in constants.items()})
    except Unsupported as problem:
        problems.append(problem)
        return None
    except (UsageError, DiagnosticError) as exc:  # a limit of fusecc's compiler (CompileError); its bugs still raise
        problems.append(Unsupported("fusecc.compile", str(exc).splitlines()[0]))
        return None
    _record.kernels += len(program.kernels)
    _record.frozen += len(constants)
    kept = [i for i, n in enumerate(placeholders) if n.name not in constants and not is_size_input(n)]  # sizes: bound from the shapes
    positions = {n.name: i for i, n in enumerate(placeholders) if n.name in constants}
    guard = _FreezeGuard(positions, {name: value.stamp for name, value in constants.items()}, build) if constants else None
    return _runner(program, devices, kept, _result_dtypes(graph_module), guard)


@dataclass
class _FrozenValue:
    array: np.ndarray
    stamp: tuple


def _frozen_placeholders(placeholders, frozen: _Frozen | None) -> dict[str, _FrozenValue]:
    """AOT autograd's inference graph takes Dynamo's inputs in order; freeze
    only when that visibly holds (same count, same shapes), else freeze nothing."""
    if frozen is None or len(placeholders) != frozen.inputs:
        return {}
    constants = {}
    for i, array in frozen.arrays.items():
        val = placeholders[i].meta.get("val")
        if not isinstance(val, torch.Tensor) or tuple(val.shape) != array.shape:
            return {}
        constants[placeholders[i].name] = _FrozenValue(array, frozen.stamps[i])
    return constants


def _eager_backward(graph_module, example_inputs):
    from functorch.compile import make_boxed_func

    return make_boxed_func(graph_module.forward)


def backend(graph_module: torch.fx.GraphModule, example_inputs, options: dict | None = None):
    """The TorchDynamo backend `fusecc` (the entry point names this function).
    options (torch.compile(..., options={...})): freeze=True compiles the
    parameters and buffers in as constants (faster: a CPU matmul packs a
    constant weight once); a call that finds one changed in place or
    replaced compiles the graph again with the new values. The default
    freezes when the graph is compiled with autograd off (torch.no_grad(),
    inference_mode), where weights rarely change; freeze=False passes them
    as inputs on every call;
    threads=N: the CPU threads fusecc's programs use (default: torch's,
    torch.get_num_threads() when the graph is compiled)."""
    from torch._dynamo.backends.common import aot_autograd

    from fusecc.frontends.torch import decompositions

    options = dict(options or {})
    freeze = options.pop("freeze", None)
    freeze = not torch.is_grad_enabled() if freeze is None else bool(freeze)
    threads = int(options.pop("threads", 0) or torch.get_num_threads())
    if options:
        raise ValueError(f"unknown fusecc backend option{'s' * (len(options) > 1)} {', '.join(sorted(options))} (known: freeze, threads)")
    frozen = None
    if freeze:
        state = {i: t for i, t in enumerate(example_inputs) if _is_module_state(t)}
        frozen = _Frozen(len(example_inputs), {i: _frozen_array(t) for i, t in state.items()}, {i: _stamp(t) for i, t in state.items()})
    fw_compiler = functools.partial(_compile_forward, frozen=frozen, threads=threads)
    compiler = aot_autograd(fw_compiler=fw_compiler, bw_compiler=_eager_backward, decompositions=decompositions())
    return compiler(graph_module, example_inputs)


def _is_module_state(t) -> bool:
    """A parameter or buffer of the model: Dynamo marks both as static inputs."""
    return isinstance(t, torch.nn.Parameter) or isinstance(t, torch.Tensor) and getattr(t, "_dynamo_static_input_type", None) is not None


def _frozen_array(t: torch.Tensor) -> np.ndarray:
    from fusecc.frontends.torch import tensor_array

    return tensor_array(t, "a frozen weight").copy()


def from_torch(module: torch.nn.Module, example_inputs, strict: bool = False, dynamic_shapes=None):
    """`module` traced by `torch.export` at `example_inputs`' shapes -> a
    tensor-IR Module (pass it to fusecc.compile or fusecc.save_module).
    `dynamic_shapes` (torch.export's, e.g. {"x": {0: torch.export.Dim("batch")}})
    makes those dims `?` dims of the program, which then runs at every size.
    Raises `fusecc.frontends.torch.Unsupported` (a UsageError) naming the
    op types fusecc lacks, with the first one's place in the source."""
    from fusecc.frontends.torch import import_exported

    program = torch.export.export(module, tuple(example_inputs), strict=strict, dynamic_shapes=dynamic_shapes)
    return import_exported(program).module


__all__ = ["backend", "explain", "from_torch", "reset", "stats", "to_array"]
