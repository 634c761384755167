"""fusecc as a PyTorch backend: `torch.compile(model, backend="fusecc")`.

    compiled = torch.compile(model, backend="fusecc")   # or backend=fusecc.torch.backend
    y = compiled(x)
    print(fusecc.torch.explain())                       # what ran on fusecc, what fell back and why

Dynamo hands each captured graph to `backend`, which runs AOT autograd with
the core aten decompositions (inference only) and gives the forward graph
to fusecc's torch front end (fusecc.frontends.torch). A graph whose ops all
translate is compiled with `fusecc.compile` on the CPU target; tensors
cross without copies where the layout allows (contiguous CPU tensors of a
dtype numpy has). A graph with an op fusecc cannot translate runs in eager,
whole (no partitioning), and the reason is logged once per op type on the
`fusecc.torch` logger and kept for `explain()`.

`from_torch(module, example_inputs)` goes through `torch.export` instead:
weights become named constants, so `fusecc.save_module(m, "model.ir")`
writes them to model.safetensors as resources.

Shapes are static: a graph with symbolic dims (what Dynamo makes after a
shape change, or with dynamic=True) falls back to eager, because fusecc has
no dynamic dims yet.
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
    compiled: int = 0  # graphs compiled by fusecc
    fallbacks: int = 0  # graphs that ran in eager
    kernels: int = 0  # kernel launches per call, summed over the compiled graphs
    frozen: int = 0  # weights compiled in as constants (options={"freeze": True})
    reasons: dict[str, str] = field(default_factory=dict)  # op type -> why, first occurrence
    where: dict[str, str] = field(default_factory=dict)  # op type -> the user's line
    counts: Counter = field(default_factory=Counter)  # op type -> graphs it sent to eager


_record = _Record()


def reset() -> None:
    """Forget what explain() reports (and log the reasons again)."""
    global _record
    _record = _Record()


def explain() -> str:
    """What the backend did since the last reset(): graphs compiled, graphs
    sent to eager, and for each op type the first reason and place."""
    r = _record
    lines = [f"fusecc torch backend: {r.compiled} graph{'s' * (r.compiled != 1)} compiled ({r.kernels} kernel launches per call, "
             f"{r.frozen} weights frozen), {r.fallbacks} ran in eager"]
    for op, reason in r.reasons.items():
        lines.append(f"  {op}: {reason} ({r.counts[op]} graph{'s' * (r.counts[op] != 1)}; first at {r.where[op]})")
    return "\n".join(lines)


def _fall_back(problems) -> None:
    _record.fallbacks += 1
    for problem in problems:
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
    """The tensor's memory as an array: no copy for a contiguous CPU tensor."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.contiguous().numpy()  # contiguous() is the tensor itself when it already is


def _runner(program, devices, kept: list[int]):
    device = devices[0] if devices else torch.device("cpu")

    def run(*args):
        args = [args[i] for i in kept]  # frozen weights are in the program already
        results = program(*[to_array(a) if isinstance(a, torch.Tensor) else np.asarray(a) for a in args])
        outs = [torch.from_numpy(np.asarray(r)) for r in results.values()]  # fresh arrays per call: shared, not copied
        return [o.to(device) if device.type != "cpu" else o for o in outs]

    return run


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


def _compile_forward(graph_module: torch.fx.GraphModule, example_inputs, frozen: _Frozen | None):
    """AOT autograd's forward graph -> a boxed callable (fusecc, or eager).
    `frozen`: positions of Dynamo's inputs to freeze as constants (weights)."""
    from functorch.compile import make_boxed_func

    from fusecc.compiler.diagnostics import DiagnosticError, UsageError
    from fusecc.driver.program import Program
    from fusecc.frontends.torch import Unsupported, import_graph, unsupported_nodes

    eager = make_boxed_func(graph_module.forward)
    missing = unsupported_nodes(graph_module.graph)
    if missing:
        _fall_back(missing)
        return eager
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    constants = _frozen_placeholders(placeholders, frozen)
    try:
        imported = import_graph(graph_module, constants=constants)
    except Unsupported as problem:
        _fall_back([problem])
        return eager
    try:
        program = Program(imported.module, target=_target(example_inputs), options={"lossy": "error"})
    except (UsageError, DiagnosticError) as exc:  # a limit of fusecc's compiler (CompileError); its bugs still raise
        _fall_back([Unsupported("fusecc.compile", str(exc).splitlines()[0])])
        return eager
    _record.compiled += 1
    _record.kernels += len(program.kernels)
    _record.frozen += len(constants)
    kept = [i for i, n in enumerate(placeholders) if n.name not in constants]
    devices = [t.device for t in example_inputs if isinstance(t, torch.Tensor)]
    return make_boxed_func(_runner(program, devices, kept))


def _frozen_placeholders(placeholders, frozen: _Frozen | None) -> dict[str, np.ndarray]:
    """AOT autograd's inference graph takes Dynamo's inputs in order; freeze
    only when that visibly holds (same count, same shapes), else freeze nothing."""
    if frozen is None or len(placeholders) != frozen.inputs:
        return {}
    constants = {}
    for i, array in frozen.arrays.items():
        val = placeholders[i].meta.get("val")
        if not isinstance(val, torch.Tensor) or tuple(val.shape) != array.shape:
            return {}
        constants[placeholders[i].name] = array
    return constants


def _eager_backward(graph_module, example_inputs):
    from functorch.compile import make_boxed_func

    return make_boxed_func(graph_module.forward)


def backend(graph_module: torch.fx.GraphModule, example_inputs, options: dict | None = None):
    """The TorchDynamo backend `fusecc` (the entry point names this function).
    options (torch.compile(..., options={...})): freeze=True compiles the
    parameters in as constants (faster: a CPU matmul packs a constant weight
    once; but later in-place changes to the weights are not seen)."""
    from torch._dynamo.backends.common import aot_autograd

    from fusecc.frontends.torch import decompositions

    options = dict(options or {})
    freeze = bool(options.pop("freeze", False))
    if options:
        raise ValueError(f"unknown fusecc backend option{'s' * (len(options) > 1)} {', '.join(sorted(options))} (known: freeze)")
    frozen = None
    if freeze:
        arrays = {i: t.detach().cpu().numpy().copy() for i, t in enumerate(example_inputs) if isinstance(t, torch.nn.Parameter)}
        frozen = _Frozen(len(example_inputs), arrays)
    fw_compiler = functools.partial(_compile_forward, frozen=frozen)
    compiler = aot_autograd(fw_compiler=fw_compiler, bw_compiler=_eager_backward, decompositions=decompositions())
    return compiler(graph_module, example_inputs)


def from_torch(module: torch.nn.Module, example_inputs, strict: bool = False):
    """`module` traced by `torch.export` at `example_inputs`' shapes -> a
    tensor-IR Module (pass it to fusecc.compile or fusecc.save_module).
    Raises `fusecc.frontends.torch.Unsupported` (a UsageError) naming the
    op types fusecc lacks, with the first one's place in the source."""
    from fusecc.frontends.torch import import_exported

    program = torch.export.export(module, tuple(example_inputs), strict=strict)
    return import_exported(program).module


__all__ = ["backend", "explain", "from_torch", "reset", "to_array"]
