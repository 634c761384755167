"""An aten-level FX graph -> one `func.func @main` of tensor-dialect ops.

Placeholders become the function's arguments (or constants, for the
parameters a `torch.export` program carries); each `call_function` node is
translated by the op table (table.py, ops_*.py), or evaluated with torch
itself when all its inputs are known at import time (`arange`, `full`, a
causal mask, a rotary table: they become constants). Every op carries the
location of the user's Python line that made its node."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np
import torch

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.diagnostics import InternalCompilerError, NameLoc
from fusecc.compiler.ir import Operation, Value
from fusecc.compiler.types import FunctionType, TensorType
from fusecc.compiler.verifier import verify
from fusecc.dialects.builtin import ModuleOp
from fusecc.dialects.func import FuncOp, ReturnOp
from fusecc.frontends.names import ssa_names
from fusecc.frontends.torch import ops_elementwise, ops_nn, ops_shape  # noqa: F401  (they fill the table)
from fusecc.frontends.torch.context import (
    TranslationContext,
    Unsupported,
    array_tensor,
    check_fold_size,
    element_of_dtype,
    fake_value,
    op_name,
    source_location,
    dim_of,
    is_symbolic,
    shape_dims,
)
from fusecc.compiler.dim_binding import DIMS_ATTR
from fusecc.compiler.dims import dims_equal
from fusecc.frontends.torch.partition import constant_nodes
from fusecc.frontends.torch.table import handler_for

INPUT_NAMES_ATTR = "torch.inputs"
OUTPUT_NAMES_ATTR = "torch.outputs"
_NO_VALUE = object()


@dataclass
class ImportedGraph:
    module: Operation
    input_names: list[str]
    output_names: list[str]
    # Nodes folded at import time (their op need not be in the table).
    folded: list[str] = field(default_factory=list)
    # The placeholders that are the function's arguments, in order (not the
    # frozen ones, not the symbolic sizes: the run binds those from the shapes).
    arguments: list[str] = field(default_factory=list)


def input_problems(graph: torch.fx.Graph) -> list[Unsupported]:
    """The first input fusecc cannot take: neither a tensor nor a symbolic
    size, or a tensor whose symbolic dims are not plain names."""
    for node in graph.nodes:
        if node.op == "placeholder" and not is_size_input(node):
            try:
                placeholder_type(node)
            except Unsupported as problem:
                return [problem]
    return []


def is_size_input(node) -> bool:
    """A placeholder for a symbolic size (Dynamo passes `s0` beside the tensors it sizes)."""
    return isinstance(fake_value(node), torch.SymInt)


def is_size_node(node) -> bool:
    """A node computing a size (sym_size, s0 * 128): an expression, no op."""
    return isinstance(fake_value(node), (torch.SymInt, torch.SymFloat, torch.SymBool))


def unsupported_nodes(graph: torch.fx.Graph, constants=()) -> list[Unsupported]:
    """Why the graph cannot be translated whole, before any work: an input
    problem (then only that: the ops on symbolic sizes need no second
    reason), else each op type without a translation, once. Nodes computed
    from constants alone (arange, full, ..., and the placeholders named in
    `constants`) fold at import time and need none."""
    problems = input_problems(graph)
    if problems:
        return problems
    found: dict[str, Unsupported] = {}
    known = constant_nodes(graph, constants)
    for node in graph.nodes:
        if node.op != "call_function" or node in known or is_size_node(node):
            continue
        name = op_name(node)
        if node.target is not operator.getitem and handler_for(name) is None and name not in found:
            found[name] = Unsupported(name, "no translation to the tensor dialect", source_location(node))
    return list(found.values())


def import_graph(
    graph_module: torch.fx.GraphModule,
    input_names: list[str] | None = None,
    constants: dict[str, np.ndarray] | None = None,
    constant_names: dict[str, str] | None = None,
) -> ImportedGraph:
    """Translate `graph_module` (aten ops, after decomposition). `constants`
    maps placeholder names to the values they are frozen to (a program's
    weights: they become `tensor.constant`s named after them); the other
    placeholders are the function's arguments (`input_names` names them).
    `constant_names` renames constants (placeholder -> state-dict key).
    Raises Unsupported for the first node fusecc cannot translate."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():  # AOT autograd calls its compilers in fake mode; folding needs real values
        return _import_graph(graph_module, input_names, constants, constant_names)


def _import_graph(graph_module, input_names, constants, constant_names) -> ImportedGraph:
    graph = graph_module.graph
    constants = constants or {}
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    arguments = [n for n in placeholders if n.name not in constants and not is_size_input(n)]
    names = input_names or [n.name for n in arguments]
    types = [placeholder_type(n) for n in arguments]
    func = FuncOp.build("main", FunctionType(types, []), ssa_names(names), location=NameLoc("forward"))
    cx = TranslationContext(Builder(InsertionPoint.at_end(func.body)))
    env: dict[torch.fx.Node, object] = dict(zip(arguments, func.body.args))
    for node in placeholders:
        if is_size_input(node):
            env[node] = dim_of(fake_value(node), f"input '{node.name}'")
    renamed = [(constant_names or {}).get(name, name) for name in constants]
    ssa = dict(zip(constants, ssa_names(renamed)))
    for node in placeholders:
        if node.name in constants:
            array = np.asarray(constants[node.name])
            env[node] = array
            cx.constant_names[id(array)] = ssa[node.name]
    imported = ImportedGraph(func, list(names), [], arguments=[n.name for n in arguments])
    folder = Folder(graph, env, constants)
    results = []
    for node in graph.nodes:
        cx.at(node)
        if node.op in ("placeholder",):
            continue
        if node.op == "get_attr":
            env[node] = tensor_array(getattr_path(graph_module, node.target), node.target)
            cx.constant_names[id(env[node])] = ssa_names([node.target])[0]
        elif node.op == "call_function":
            env[node] = translate_node(cx, node, env, imported, folder)
        elif node.op == "output":
            outputs = node.args[0]
            for i, out in enumerate(outputs if isinstance(outputs, (list, tuple)) else [outputs]):
                entry = env.get(out, _NO_VALUE) if isinstance(out, torch.fx.Node) else out
                if not isinstance(entry, (Value, np.ndarray)):
                    raise Unsupported("output", f"output {i} is {type(entry).__name__ if entry is not _NO_VALUE else 'missing'}, not a tensor", cx.location)
                results.append(cx.value(entry))
                imported.output_names.append(out.name if isinstance(out, torch.fx.Node) else f"output{i}")
        else:
            raise Unsupported(node.op, f"FX node kind '{node.op}' (call_module/call_method: the graph is not at the aten level)", cx.location)
    cx.builder.create(ReturnOp, results, result_types=[], location=NameLoc("return"))
    erase_unused(func)
    func.attributes["function_type"] = A.TypeAttr(FunctionType(types, [r.type for r in results]))
    func.attributes[INPUT_NAMES_ATTR] = A.from_python(list(names))
    func.attributes[OUTPUT_NAMES_ATTR] = A.from_python(imported.output_names)
    if any(not t.is_static for t in types):
        func.attributes[DIMS_ATTR] = A.from_python([[d.name for d in t.shape if type(d) is not int] for t in types])
    module = ModuleOp.build([func])
    verify(module)
    imported.module = module
    return imported


class Folder:
    """Values of the nodes computed from constants alone, evaluated by torch
    when asked: a node of that kind without a translation (cos of a frozen
    rotary buffer) folds, though its inputs were translated to keep the
    weights named (a frozen weight's transpose stays `tensor.transpose`)."""

    def __init__(self, graph: torch.fx.Graph, env: dict, constants):
        self.known = constant_nodes(graph, constants)
        self.env = env
        self.values: dict = {}

    def foldable(self, node) -> bool:
        return node in self.known

    def value(self, node):
        entry = self.env.get(node)
        if isinstance(entry, np.ndarray):
            return entry
        if node not in self.values:
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), self.value)
            self.values[node] = fold(node, args, kwargs)
        return self.values[node]


def translate_node(cx: TranslationContext, node, env: dict, imported: ImportedGraph, folder: Folder):
    if is_size_node(node):
        return dim_of(fake_value(node), op_name(node)) if isinstance(fake_value(node), torch.SymInt) else fake_value(node)
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: env[n])
    if node.target is operator.getitem:
        sequence, index = args
        picked = sequence[index]
        if picked is None:
            raise Unsupported(f"{op_name(node.args[0])} output {index}", "used for gradients, which fusecc does not compute "
                              "(inference only: call the model under torch.no_grad() or torch.inference_mode())", cx.location)
        return picked
    name = op_name(node)
    flat = list(args) + list(kwargs.values())
    flat = [x for a in flat for x in (a if isinstance(a, (list, tuple)) else [a])]
    symbolic = any(is_symbolic(x) for x in flat) or not cx.result_is_static()
    if not symbolic and not any(isinstance(x, Value) for x in flat) and not any(id(x) in cx.constant_names for x in flat):
        imported.folded.append(name)
        return fold(node, args, kwargs)
    handler = handler_for(name)
    if handler is None and folder.foldable(node):
        imported.folded.append(name)
        return folder.value(node)
    if handler is None:
        raise cx.unsupported("no translation to the tensor dialect")
    if not symbolic:
        result = handler(cx, args, kwargs)
    else:
        try:
            result = handler(cx, args, kwargs)
        except (TypeError, ValueError) as exc:  # a translation doing arithmetic that needs the sizes
            raise cx.unsupported(f"its translation needs sizes known at compile time ({type(exc).__name__}: {exc})") from None
    check_result(node, result)
    return result


def erase_unused(func) -> None:
    """Drop ops nothing uses (the transpose a linear layer's matmul reads
    through, constants only folding needed), last first."""
    for op in reversed(list(func.body)):
        if op.results and not any(r.has_uses() for r in op.results):
            op.erase()


def fold(node, args, kwargs):
    """Evaluate a node whose inputs are all known, with torch itself."""
    to_torch = lambda x: array_tensor(x) if isinstance(x, np.ndarray) else x  # noqa: E731
    args, kwargs = torch.utils._pytree.tree_map(to_torch, (args, kwargs))
    val = fake_value(node)
    if isinstance(val, torch.Tensor):
        check_fold_size(shape_dims(val, f"the result of {op_name(node)}"), val.element_size())
    with torch.no_grad():
        out = node.target(*args, **kwargs)
    return torch.utils._pytree.tree_map(lambda t: tensor_array(t, op_name(node)) if isinstance(t, torch.Tensor) else t, out)


def check_result(node, result) -> None:
    """A translation gives the shape and dtype torch recorded, or it is a bug."""
    val = fake_value(node)
    pairs = zip(result, val) if isinstance(result, tuple) else [(result, val)]
    for entry, expected in pairs:
        if not isinstance(entry, Value) or not isinstance(expected, torch.Tensor):
            continue
        want = TensorType(shape_dims(expected, op_name(node)), element_of_dtype(expected.dtype))
        if entry.type != want and not (entry.type.element_type is want.element_type and entry.type.rank == want.rank
                                       and all(dims_equal(a, b) is not False for a, b in zip(entry.type.shape, want.shape))):
            raise InternalCompilerError(
                "the torch front end", AssertionError(f"{op_name(node)} at {source_location(node)} translated to {entry.type}, torch says {want}"))


def placeholder_type(node) -> TensorType:
    """The argument's type; a symbolic dim must be a plain size (`s0`), which
    names the dim in `fusecc.dims` (the run binds it from the tensor's shape)."""
    val = fake_value(node)
    if not isinstance(val, torch.Tensor):
        raise Unsupported("input", f"input '{node.name}' is a {type(val).__name__}, not a tensor", source_location(node))
    dims = shape_dims(val, f"input '{node.name}'")
    for axis, d in enumerate(dims):
        if type(d) is not int and not d.is_Symbol:
            raise Unsupported("symbolic shape", f"input '{node.name}' axis {axis} has size {d}, an expression: fusecc binds "
                              "an input's dynamic dims by name only", source_location(node))
    return TensorType(dims, element_of_dtype(val.dtype, f"input '{node.name}'"))


def tensor_array(t: torch.Tensor, what: str) -> np.ndarray:
    """The tensor as an array; bfloat16 as ml_dtypes' bfloat16 (numpy has none)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        try:
            import ml_dtypes
        except ImportError:
            raise Unsupported("constant", f"{what} is a bfloat16 constant, which needs ml_dtypes (pip install ml-dtypes)") from None
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    element_of_dtype(t.dtype, what)
    return t.numpy()


def getattr_path(module, target: str):
    for part in target.split("."):
        module = getattr(module, part)
    return module


__all__ = ["ImportedGraph", "INPUT_NAMES_ATTR", "OUTPUT_NAMES_ATTR", "import_graph", "unsupported_nodes"]
