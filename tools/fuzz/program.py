"""A fuzz program: functions of tensor ops as plain records, their types
inferred from the language reference, printed as textual IR.

The records are what the generator builds, the oracle evaluates and the
reducer edits; the types are never stored, only inferred (`infer_types`),
so that an edit (an op removed, a dimension shrunk) is re-checked at once.
A program the inference refuses is invalid; one it accepts must verify.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

FLOATS = ("f32", "f16", "bf16")
INTS = ("i32", "i64")
DTYPES = FLOATS + INTS + ("i1",)

BINARY = ("add", "sub", "mul", "div", "max", "min", "pow")
UNARY = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "reciprocal", "relu", "sigmoid", "silu", "gelu")
REDUCTIONS = ("reduce_sum", "reduce_max", "reduce_min", "reduce_mean")
PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge")


class Invalid(ValueError):
    """The records break a rule of the language reference."""


@dataclass(frozen=True)
class Type:
    shape: tuple[int, ...]
    dtype: str

    def text(self) -> str:
        return "tensor<" + "".join(f"{d}x" for d in self.shape) + self.dtype + ">"

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass
class Op:
    kind: str  # "add", "reduce_sum", "constant", "call", ...
    operands: list[str]
    results: list[str]
    attrs: dict = field(default_factory=dict)  # plain JSON values; a constant's "value" is a nested list


@dataclass
class Function:
    name: str
    args: list[tuple[str, Type]]
    ops: list[Op]
    returns: list[str]


@dataclass
class Program:
    functions: list[Function]  # the entry, @main, is the last one

    @property
    def main(self) -> Function:
        return self.functions[-1]

    def to_json(self) -> dict:
        return {"functions": [dataclasses.asdict(f) for f in self.functions]}

    @staticmethod
    def from_json(data: dict) -> "Program":
        functions = []
        for f in data["functions"]:
            args = [(name, Type(tuple(t["shape"]), t["dtype"])) for name, t in f["args"]]
            ops = [Op(o["kind"], list(o["operands"]), list(o["results"]), dict(o["attrs"])) for o in f["ops"]]
            functions.append(Function(f["name"], args, ops, list(f["returns"])))
        return Program(functions)

    def clone(self) -> "Program":
        return Program.from_json(json.loads(json.dumps(self.to_json())))

    def op_count(self) -> int:
        return sum(len(f.ops) for f in self.functions)


# --------------------------------------------------------------------------- types, from the language reference


def broadcast(*shapes: Sequence[int]) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        dims = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise Invalid(f"shapes {list(map(list, shapes))} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise Invalid(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def slice_lengths(shape, start, stop, step) -> list[tuple[int, int, int]]:
    """(start, step, length) per axis, as Python's slice.indices normalises them."""
    if not (len(start) == len(stop) == len(step) == len(shape)):
        raise Invalid("slice needs one start, stop and step per axis")
    out = []
    for n, a, b, s in zip(shape, start, stop, step):
        if s == 0:
            raise Invalid("slice step 0")
        first, last, stride = slice(a, b, s).indices(n)
        out.append((first, stride, len(range(first, last, stride))))
    return out


def result_types(op: Op, operands: list[Type], callee: Function | None = None, callee_types: list[Type] | None = None) -> list[Type]:
    k, a = op.kind, op.attrs
    if k == "constant":
        return [Type(tuple(a["shape"]), a["dtype"])]
    if k == "call":
        if callee is None:
            raise Invalid(f"no function @{a['callee']}")
        if [t for _, t in callee.args] != operands:
            raise Invalid(f"call of @{callee.name} with the wrong argument types")
        return list(callee_types)
    x = operands[0] if operands else None
    if k in BINARY:
        if operands[0].dtype != operands[1].dtype:
            raise Invalid("element types differ")
        if x.dtype == "i1" and k not in ("max", "min"):
            raise Invalid(f"{k} has no i1 form (max and min are or and and)")
        return [Type(broadcast(operands[0].shape, operands[1].shape), x.dtype)]
    if k == "cmp":
        if operands[0].dtype != operands[1].dtype:
            raise Invalid("element types differ")
        return [Type(broadcast(operands[0].shape, operands[1].shape), "i1")]
    if k == "select":
        c, p, q = operands
        if c.dtype != "i1" or p.dtype != q.dtype:
            raise Invalid("select needs an i1 condition and equal branch types")
        return [Type(broadcast(c.shape, p.shape, q.shape), p.dtype)]
    if k in UNARY:
        if k not in ("neg", "abs", "relu") and x.dtype not in FLOATS:
            raise Invalid(f"{k} on floats only")
        if x.dtype == "i1":
            raise Invalid(f"{k} has no i1 form")
        return [x]
    if k == "cast":
        return [Type(x.shape, a["to"])]
    if k in REDUCTIONS:
        axes = sorted({normalize_axis(ax, len(x.shape)) for ax in a["axes"]})
        if len(axes) != len(a["axes"]):
            raise Invalid("repeated axis")
        if k == "reduce_mean" and x.dtype not in FLOATS:
            raise Invalid("reduce_mean on floats only here")
        if k in ("reduce_max", "reduce_min") and any(x.shape[ax] == 0 for ax in axes):
            raise Invalid("max/min over an empty axis has no value")
        keep = a.get("keepdims", False)
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
        return [Type(shape, x.dtype)]
    if k == "softmax":
        if x.dtype not in FLOATS:
            raise Invalid("softmax on floats")
        normalize_axis(a.get("axis", -1), len(x.shape))
        return [x]
    if k in ("layernorm", "rmsnorm"):
        if x.dtype not in FLOATS or not x.shape or any(t != Type((x.shape[-1],), x.dtype) for t in operands[1:]):
            raise Invalid(f"{k} takes [last-axis] parameters of its type")
        return [x]
    if k == "matmul":
        p, q = operands
        if p.dtype != q.dtype or p.dtype not in FLOATS or len(p.shape) < 2 or len(q.shape) < 2:
            raise Invalid("matmul of float matrices")
        m, kk = (p.shape[-1], p.shape[-2]) if a.get("transpose_a") else p.shape[-2:]
        k2, n = (q.shape[-1], q.shape[-2]) if a.get("transpose_b") else q.shape[-2:]
        if kk != k2:
            raise Invalid("contraction sizes differ")
        return [Type(broadcast(p.shape[:-2], q.shape[:-2]) + (m, n), p.dtype)]
    if k == "attention":
        q, kk, v = operands[:3]
        if len({t.dtype for t in operands}) != 1 or q.dtype not in FLOATS or min(len(t.shape) for t in (q, kk, v)) < 2:
            raise Invalid("attention on float tensors of rank >= 2")
        if q.shape[:-2] != kk.shape[:-2] or kk.shape[:-2] != v.shape[:-2] or q.shape[-1] != kk.shape[-1] or kk.shape[-2] != v.shape[-2]:
            raise Invalid("attention shapes")
        scores = q.shape[:-1] + (kk.shape[-2],)
        if len(operands) == 4 and broadcast(operands[3].shape, scores) != scores:
            raise Invalid("mask does not broadcast to the scores")
        return [Type(q.shape[:-1] + (v.shape[-1],), q.dtype)]
    if k == "reshape":
        shape = tuple(a["shape"])
        if int(np.prod(shape, dtype=np.int64)) != x.size:
            raise Invalid("reshape changes the size")
        return [Type(shape, x.dtype)]
    if k == "transpose":
        perm = a["perm"]
        if sorted(perm) != list(range(len(x.shape))):
            raise Invalid("bad permutation")
        return [Type(tuple(x.shape[p] for p in perm), x.dtype)]
    if k == "broadcast_to":
        shape = tuple(a["shape"])
        if broadcast(x.shape, shape) != shape:
            raise Invalid("does not broadcast to the shape")
        return [Type(shape, x.dtype)]
    if k == "slice":
        return [Type(tuple(n for _, _, n in slice_lengths(x.shape, a["start"], a["stop"], a["step"])), x.dtype)]
    if k == "concat":
        axis = normalize_axis(a["axis"], len(x.shape))
        if any(t.dtype != x.dtype or len(t.shape) != len(x.shape) or any(d != e for i, (d, e) in enumerate(zip(t.shape, x.shape)) if i != axis) for t in operands):
            raise Invalid("concat operands differ off the axis")
        shape = list(x.shape)
        shape[axis] = sum(t.shape[axis] for t in operands)
        return [Type(tuple(shape), x.dtype)]
    if k == "gather":
        data, idx = operands
        axis = normalize_axis(a.get("axis", 0), len(data.shape))
        if idx.dtype not in INTS:
            raise Invalid("gather indices are i32 or i64")
        if data.shape[axis] == 0 and idx.size:
            raise Invalid("gather from an empty axis")
        return [Type(data.shape[:axis] + idx.shape + data.shape[axis + 1 :], data.dtype)]
    raise Invalid(f"unknown op kind {k}")


def infer_types(program: Program) -> dict[tuple[str, str], Type]:
    """{(function, value name): type} of every value; raises Invalid."""
    types: dict[tuple[str, str], Type] = {}
    returned: dict[str, list[Type]] = {}
    for f in program.functions:
        for name, t in f.args:
            types[f.name, name] = t
        for op in f.ops:
            try:
                operands = [types[f.name, v] for v in op.operands]
            except KeyError as exc:
                raise Invalid(f"use of an undefined value {exc}") from None
            callee = next((g for g in program.functions if g.name == op.attrs.get("callee")), None) if op.kind == "call" else None
            found = result_types(op, operands, callee, returned.get(callee.name) if callee else None)
            if len(found) != len(op.results):
                raise Invalid(f"{op.kind} gives {len(found)} results")
            for name, t in zip(op.results, found):
                types[f.name, name] = t
        try:
            returned[f.name] = [types[f.name, v] for v in f.returns]
        except KeyError as exc:
            raise Invalid(f"return of an undefined value {exc}") from None
    return types


# --------------------------------------------------------------------------- printing


_HEX = {"f32": ("<f4", np.uint32, 8), "f16": ("<f2", np.uint16, 4)}


def _scalar_text(x, dtype: str) -> str:
    if dtype == "i1":
        return "true" if x else "false"
    if dtype in INTS:
        return str(int(x))
    x = float(x)
    if np.isfinite(x):
        return repr(x)
    if dtype == "bf16":
        bits = int(np.array([x], np.float32).view(np.uint32)[0]) >> 16
        return f"0x{bits:04X}"
    fmt, view, digits = _HEX[dtype]
    return f"0x{int(np.array([x], fmt).view(view)[0]):0{digits}X}"


def dense_text(value, dtype: str) -> str:
    array = np.asarray(value, dtype=object)
    if array.ndim == 0:
        return f"dense<{_scalar_text(array.item(), dtype)}>"
    if array.size == 0:
        return f"dense<{_scalar_text(0, dtype)}>"  # an empty tensor's only literal is a splat

    def nested(a):
        if a.ndim == 1:
            return "[" + ", ".join(_scalar_text(x, dtype) for x in a) + "]"
        return "[" + ", ".join(nested(b) for b in a) + "]"

    return f"dense<{nested(array)}>"


def _attr_text(name: str, value) -> str:
    if isinstance(value, bool):
        return f"{name} = {'true' if value else 'false'}"
    if isinstance(value, str):
        return f'{name} = "{value}"'
    if isinstance(value, float):
        return f"{name} = {value:.6e}"
    if isinstance(value, list):
        return f"{name} = [{', '.join(str(v) for v in value)}]"
    return f"{name} = {value}"


PRINTED_ATTRS = {
    "reduce": ("axes", "keepdims"),
    "softmax": ("axis",),
    "layernorm": ("epsilon",),
    "rmsnorm": ("epsilon",),
    "matmul": ("transpose_a", "transpose_b"),
    "attention": ("scale", "causal"),
    "transpose": ("perm",),
    "slice": ("start", "stop", "step"),
    "concat": ("axis",),
    "gather": ("axis",),
    "cmp": ("predicate",),
    "gelu": ("approximate",),
}


RESOURCE_FILE = "fuzz-resources.npz"  # beside the .ir: the module names it (docs/resources.md)


def resource_name(function: Function, op: Op) -> str:
    return f"{function.name}_{op.results[0]}"


def is_resource(op: Op) -> bool:
    return op.kind == "constant" and bool(op.attrs.get("resource"))


def resource_arrays(program: Program) -> dict[str, np.ndarray]:
    """The elements of each `dense_resource` constant, by resource name, in
    the storage dtype the resource file holds (f32, f16, i32, i64, bool)."""
    arrays = {}
    for f in program.functions:
        for op in f.ops:
            if is_resource(op):
                dtype = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "i1": np.bool_}[op.attrs["dtype"]]
                arrays[resource_name(f, op)] = np.asarray(op.attrs["value"]).astype(dtype).reshape(op.attrs["shape"])
    return arrays


def print_program(program: Program, resource_file: str = RESOURCE_FILE) -> str:
    """The textual IR; with `dense_resource` constants, inside a module that
    names `resource_file` (write `resource_arrays` there, `np.savez`)."""
    types = infer_types(program)
    lines = []
    for f in program.functions:
        args = ", ".join(f"%{n}: {t.text()}" for n, t in f.args)
        rets = [types[f.name, v] for v in f.returns]
        ret_text = rets[0].text() if len(rets) == 1 else "(" + ", ".join(t.text() for t in rets) + ")"
        lines.append(f"func.func @{f.name}({args}) -> {ret_text} {{")
        for op in f.ops:
            operand_types = [types[f.name, v].text() for v in op.operands]
            result_types_ = [types[f.name, v].text() for v in op.results]
            names = ", ".join(f"%{r}" for r in op.results)
            if op.kind == "constant":
                t = types[f.name, op.results[0]]
                value = f"dense_resource<{resource_name(f, op)}>" if is_resource(op) else dense_text(op.attrs["value"], t.dtype)
                lines.append(f"  {names} = tensor.constant {{value = {value} : {t.text()}}} : () -> {t.text()}")
                continue
            if op.kind == "call":
                results = result_types_[0] if len(result_types_) == 1 else "(" + ", ".join(result_types_) + ")"
                lines.append(f"  {names} = func.call @{op.attrs['callee']}({', '.join('%' + v for v in op.operands)}) : ({', '.join(operand_types)}) -> {results}")
                continue
            keys = PRINTED_ATTRS.get("reduce" if op.kind in REDUCTIONS else op.kind, ())
            attrs = [_attr_text(key, op.attrs[key]) for key in keys if key in op.attrs]
            attr_text = f" {{{', '.join(attrs)}}}" if attrs else ""
            lines.append(f"  {names} = tensor.{op.kind} {', '.join('%' + v for v in op.operands)}{attr_text} : ({', '.join(operand_types)}) -> {result_types_[0]}")
        lines.append(f"  func.return {', '.join('%' + v for v in f.returns)} : {', '.join(t.text() for t in rets)}")
        lines.append("}")
    if any(is_resource(op) for f in program.functions for op in f.ops):
        lines = [f'module attributes {{fusecc.resources = "{resource_file}"}} {{', *lines, "}"]
    return "\n".join(lines) + "\n"
