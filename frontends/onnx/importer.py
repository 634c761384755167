"""ONNX graph -> one `func.func @main` of tensor-dialect ops.

Nodes are visited in the graph's (topological) order. Each output is either
a numpy array, when everything it depends on is known at import time, or an
SSA value; arrays become `tensor.constant` only where a runtime op uses
them. Every op carries its node's name as location (`loc("node_name")`).
Graph inputs become the function's arguments, named after them; the
original input and output names are kept on the function as `onnx.inputs`
and `onnx.outputs`, which `fusecc run` uses for its npz keys.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import numpy as np

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder, InsertionPoint
from fusecc.compiler.diagnostics import NameLoc
from fusecc.compiler.dim_binding import DIMS_ATTR
from fusecc.compiler.dims import dim_symbol
from fusecc.compiler.ir import Operation
from fusecc.compiler.progress import progress
from fusecc.frontends.names import ssa_names
from fusecc.compiler.types import FunctionType, TensorType
from fusecc.compiler.verifier import verify
from fusecc.dialects.builtin import ModuleOp
from fusecc.dialects.func import FuncOp, ReturnOp
from fusecc.frontends.onnx import folding, ops_elementwise, ops_nn, ops_shape  # noqa: F401  (they fill the table)
from fusecc.frontends.onnx.context import ONNX_ELEMENT_TYPES, ImportContext, Node, is_constant, onnx_type_name
from fusecc.frontends.onnx.errors import ModelError, Unsupported, UnsupportedNodes
from fusecc.frontends.onnx.loading import LoadedModel, load_model, memory_budget, require_onnx
from fusecc.frontends.onnx.table import TABLE

INPUT_NAMES_ATTR = "onnx.inputs"
OUTPUT_NAMES_ATTR = "onnx.outputs"


@dataclass
class ImportedModel:
    module: Operation
    input_names: list[str]
    output_names: list[str]
    node_count: int
    timings: dict[str, float] = field(default_factory=dict)
    external_data: bool = False  # tensors were read from files beside the model (not keyed by its digest)


def import_onnx(
    path: str,
    shapes: dict[str, tuple[int, ...]] | None = None,
    budget: int | None = None,
    bind: dict[str, np.ndarray] | None = None,
) -> ImportedModel:
    """Read, check and translate an ONNX model. `shapes` maps an input's
    name (or a symbolic dim's name) to the dims it is specialised to;
    `bind` freezes inputs to constant values (they leave the signature)."""
    started = time.perf_counter()
    require_onnx()  # the onnx package's messages (proto.py: the package itself is not imported); timed apart
    start = time.perf_counter()
    budget = memory_budget(budget)
    loaded = load_model(path, budget)
    graph = loaded.proto.graph
    nodes = [Node.of(proto, i) for i, proto in enumerate(graph.node)]
    refuse_unsupported(path, nodes)
    read = time.perf_counter()

    initializers = initializer_arrays(loaded)
    initializers.update({name: np.asarray(value) for name, value in (bind or {}).items()})
    inputs = [i for i in graph.input if i.name not in initializers]
    types = input_types(path, inputs, shapes or {})
    names = ssa_names([i.name for i in inputs])
    func = FuncOp.build("main", FunctionType(types, []), names, location=NameLoc(graph.name or "main"))
    cx = ImportContext(path, Builder(InsertionPoint.at_end(func.body)), budget)
    env: dict[str, object] = dict(initializers)
    cx.constant_names = {id(array): name for array, name in zip(initializers.values(), ssa_names(list(initializers)))}
    env.update({i.name: arg for i, arg in zip(inputs, func.body.args)})
    for node in progress(nodes, f"importing {len(nodes)} ONNX nodes", total=len(nodes)):
        translate_node(cx, node, env)

    results = []
    for output in graph.output:
        if output.name not in env:
            raise ModelError(f"{path}: graph output '{output.name}' is produced by no node")
        cx.node = Node("Output", output.name, [], [])
        results.append(cx.value(env[output.name]))
    cx.builder.create(ReturnOp, results, result_types=[], location=NameLoc("return"))
    func.attributes["function_type"] = A.TypeAttr(FunctionType(types, [r.type for r in results]))
    if any(not t.is_static for t in types):
        func.attributes[DIMS_ATTR] = dims_attribute(types)
    func.attributes[INPUT_NAMES_ATTR] = A.from_python([i.name for i in inputs])
    func.attributes[OUTPUT_NAMES_ATTR] = A.from_python([o.name for o in graph.output])
    module = ModuleOp.build([func])
    verify(module)
    done = time.perf_counter()
    return ImportedModel(module, [i.name for i in inputs], [o.name for o in graph.output], len(nodes),
                         {"onnx package": start - started, "read and check": read - start, "translate": done - read},
                         external_data=bool(loaded.external))


def translate_node(cx: ImportContext, node: Node, env: dict) -> None:
    cx.node = node
    args = []
    for name in node.inputs:
        if name and name not in env:
            raise cx.fail(f"input '{name}' is produced by no earlier node (the graph is not in topological order, or the name is wrong)")
        args.append(env[name] if name else None)
    while args and args[-1] is None:
        args.pop()
    rule = TABLE[node.op_type]
    known = all(a is None or is_constant(a) for a in args)
    outputs = None
    if rule.fold is not None and (known or rule.folds_from_shapes):
        try:
            with np.errstate(all="ignore"):
                outputs = [np.asarray(out) for out in rule.fold(cx, node, args)]
        except (ValueError, IndexError, TypeError, OverflowError) as exc:
            # Shape arithmetic on dynamic dims that numpy cannot finish (a
            # constant sliced to S) runs as ops instead.
            if rule.translate is None or not any(folding.is_symbolic(a) for a in args):
                raise cx.fail(f"cannot be evaluated: {exc}") from None
    if outputs is not None:
        pass
    elif rule.translate is not None:
        outputs = rule.translate(cx, node, args)
    else:
        raise cx.fail("its inputs must be known at import time (constants, or computed from shapes and constants)")
    for name, value in zip(node.outputs, outputs):
        if name:
            env[name] = value


def refuse_unsupported(path: str, nodes: list[Node]) -> None:
    """One error listing every node we cannot import, before any work."""
    found = []
    for node in nodes:
        reason = unsupported_reason(node)
        if reason:
            found.append(Unsupported(node.op_type, node.name, reason))
    if found:
        raise UnsupportedNodes(path, found)


def unsupported_reason(node: Node) -> str | None:
    if node.domain not in ("", "ai.onnx"):
        return f"operator domain '{node.domain}' is not supported"
    rule = TABLE.get(node.op_type)
    if rule is None:
        return "operator not supported"
    extra = sorted(set(node.attrs) - rule.attrs)
    if extra:
        return f"attribute{'s' * (len(extra) > 1)} {', '.join(extra)} not supported"
    return rule.check(node) if rule.check else None


def initializer_arrays(loaded: LoadedModel) -> dict[str, np.ndarray]:
    from fusecc.frontends.onnx.proto import to_array

    arrays = {}
    for tensor in loaded.proto.graph.initializer:
        found = loaded.external.get(tensor.name)
        arrays[tensor.name] = found if found is not None else to_array(tensor, loaded.raw.get(tensor.name))
    return arrays


def input_types(path: str, inputs, shapes: dict[str, tuple[int, ...]]) -> list[TensorType]:
    """Static types of the graph inputs: declared dims, `shapes` by input
    name, or symbolic dims bound by name; any dim left open is an error
    that lists them all."""
    input_names = {i.name for i in inputs}
    dim_names = {d.dim_param for i in inputs for d in i.type.tensor_type.shape.dim if d.HasField("dim_param")}
    for name, dims in shapes.items():
        if name not in input_names and not (name in dim_names and len(dims) == 1):
            raise ModelError(
                f"{path}: --shape names '{name}', which is neither an input ({', '.join(sorted(input_names))}) "
                f"nor a symbolic dim given one size ({', '.join(sorted(dim_names)) or 'none'})"
            )
    bound: dict[str, int] = {k: v[0] for k, v in shapes.items() if k not in input_names}
    for i in inputs:
        if i.name in shapes:
            declared = i.type.tensor_type.shape.dim
            given = shapes[i.name]
            if len(declared) and len(declared) != len(given):
                raise ModelError(f"{path}: --shape gives input '{i.name}' {len(given)} dims, but it has {len(declared)}")
            for d, size in zip(declared, given):
                if d.HasField("dim_value") and d.dim_value != size:
                    raise ModelError(f"{path}: --shape gives input '{i.name}' the dims {list(given)}, but its dim {d.dim_value} is fixed")
                if d.HasField("dim_param"):
                    bound.setdefault(d.dim_param, size)
    types = []
    for i in inputs:
        tensor_type = i.type.tensor_type
        if not i.type.HasField("tensor_type"):
            raise ModelError(f"{path}: input '{i.name}' is not a tensor")
        element = ONNX_ELEMENT_TYPES.get(tensor_type.elem_type)
        if element is None:
            raise ModelError(f"{path}: input '{i.name}' has element type {onnx_type_name(tensor_type.elem_type)}, which fusecc does not have")
        if i.name in shapes:
            types.append(TensorType(tuple(shapes[i.name]), element))
            continue
        if not tensor_type.HasField("shape"):
            raise ModelError(f"{path}: input '{i.name}' has no declared rank; give its dims with --shape {i.name}=DIMS")
        dims = []
        for axis, d in enumerate(tensor_type.shape.dim):
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            elif d.HasField("dim_param") and d.dim_param in bound:
                dims.append(bound[d.dim_param])
            else:  # kept symbolic: a `?` dim named after the model's dim (docs/dynamic-shapes.md)
                dims.append(dim_symbol(dim_name(d.dim_param or f"{i.name}_{axis}")))
        types.append(TensorType(tuple(dims), element))
    return types


def dim_name(text: str) -> str:
    """An ONNX dim name (`batch_size`, `unk__614`, `batch size`) as an identifier."""
    name = re.sub(r"\W", "_", text)
    return name if name and not name[0].isdigit() else f"d_{name}"


def dims_attribute(types) -> A.Attribute:
    """`fusecc.dims`: the names of each argument's `?` dims, so the text keeps them."""
    return A.from_python([[str(d) for d in t.shape if type(d) is not int] for t in types])
