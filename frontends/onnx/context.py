"""What a translation sees: the node, its inputs (numpy arrays for what is
known at import time, SSA values for the rest) and a builder that places
tensor-dialect ops at the node's location."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder
from fusecc.compiler.diagnostics import Location, NameLoc
from fusecc.compiler.ir import Value, VerifyError
from fusecc.compiler.types import ScalarType, TensorType, bf16, f16, f32, i1, i32, i64
from fusecc.dialects import tensor as T
from fusecc.frontends.onnx.errors import NodeError

# ONNX TensorProto element types that the tensor dialect holds.
ONNX_ELEMENT_TYPES: dict[int, ScalarType] = {1: f32, 6: i32, 7: i64, 9: i1, 10: f16, 16: bf16}
ONNX_TYPE_NAMES = {1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string",
                   9: "bool", 10: "float16", 11: "double", 12: "uint32", 13: "uint64", 16: "bfloat16"}
NUMPY_ELEMENT_TYPES = {np.dtype(np.float32): f32, np.dtype(np.float16): f16, np.dtype(np.int64): i64,
                       np.dtype(np.int32): i32, np.dtype(np.bool_): i1}


def onnx_type_name(code: int) -> str:
    return ONNX_TYPE_NAMES.get(code, f"type {code}")


@dataclass
class Node:
    """An ONNX node, its attributes decoded to Python values."""

    op_type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""

    @classmethod
    def of(cls, proto, index: int) -> "Node":
        from fusecc.frontends.onnx.proto import attribute_value

        attrs = {}
        for a in proto.attribute:
            value = attribute_value(a)
            attrs[a.name] = value.decode() if isinstance(value, bytes) else value
        name = proto.name or f"{proto.op_type}_{index}"
        return cls(proto.op_type, name, list(proto.input), list(proto.output), attrs, proto.domain)

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    @property
    def location(self) -> Location:
        return NameLoc(self.name)

    def uses_output(self, index: int) -> bool:
        return index < len(self.outputs) and self.outputs[index] != ""


Entry = np.ndarray | Value


class ImportContext:
    """Builds the ops of one node after another."""

    def __init__(self, path: str, builder: Builder, budget: int):
        self.path = path
        self.builder = builder
        self.budget = budget
        self.node: Node | None = None
        self._materialized: dict[int, tuple[np.ndarray, Value]] = {}
        # Initializers keep their ONNX name as the constant's SSA name (and resource name).
        self.constant_names: dict[int, str] = {}

    # --- errors --------------------------------------------------------------
    def fail(self, message: str) -> NodeError:
        return NodeError(self.path, self.node.op_type, self.node.name, message)

    def check_size(self, shape, dtype) -> None:
        """Refuse a folded result larger than the memory budget before allocating it."""
        nbytes = math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize
        if any(int(d) < 0 for d in shape) or nbytes > self.budget:
            raise self.fail(f"would create a {list(map(int, shape))} tensor ({nbytes} bytes), over the memory budget of {self.budget}")

    # --- values --------------------------------------------------------------
    def element_of_dtype(self, dtype) -> ScalarType:
        found = NUMPY_ELEMENT_TYPES.get(np.dtype(dtype))
        if found is None:
            raise self.fail(f"element type {np.dtype(dtype)} has no tensor-dialect equivalent")
        return found

    def value(self, entry: Entry) -> Value:
        """An SSA value for an input; constants become `tensor.constant` once."""
        if isinstance(entry, Value):
            return entry
        array = np.asarray(entry)
        if array.dtype == object:
            raise self.fail(
                f"uses a shape computed from dynamic dims ({array.tolist()}) as a run-time tensor, which fusecc cannot yet; "
                "specialise the dims with --shape (docs/dynamic-shapes.md)"
            )
        cached = self._materialized.get(id(entry))
        if cached is not None and cached[0] is entry:
            return cached[1]
        if array.dtype.name == "bfloat16":  # onnx's numpy view of bf16; fusecc stores bf16 as f32
            array, element = array.astype(np.float32), bf16
        else:
            element = self.element_of_dtype(array.dtype)
        op = self.builder.create(T.ConstantOp, [], {"value": A.DenseElementsAttr(array, TensorType(array.shape, element))}, location=self.node.location)
        self._materialized[id(entry)] = (entry, op.result)
        if id(entry) in self.constant_names:
            op.result.name_hint = self.constant_names[id(entry)]
        return op.result

    def constant(self, entry: Entry | None, what: str) -> np.ndarray | None:
        """An input that must be known at import time (axes, shapes, bounds)."""
        if entry is None or isinstance(entry, np.ndarray):
            return entry
        raise self.fail(f"{what} must be a constant (or computed from shapes and constants); here it is computed at run time")

    def scalar(self, number, element: ScalarType) -> Value:
        return self.value(np.asarray(number, dtype=element.numpy_dtype))

    # --- ops -----------------------------------------------------------------
    def emit(self, op_class, operands, attributes=None, result_type=None) -> Value:
        values = [self.value(x) for x in operands]
        try:
            op = self.builder.create(op_class, values, attributes, None if result_type is None else [result_type], location=self.node.location)
        except VerifyError as exc:
            raise self.fail(f"{op_class.name}: {exc}") from None
        return op.result


def shape_of(entry: Entry) -> tuple[int, ...]:
    return tuple(entry.type.shape) if isinstance(entry, Value) else tuple(np.shape(entry))


def element_of(entry: Entry) -> ScalarType:
    if isinstance(entry, Value):
        return entry.type.element_type
    return NUMPY_ELEMENT_TYPES.get(np.asarray(entry).dtype, f32)


def is_constant(entry) -> bool:
    return isinstance(entry, np.ndarray)


__all__ = ["ImportContext", "Node", "Entry", "shape_of", "element_of", "is_constant", "ONNX_ELEMENT_TYPES", "onnx_type_name"]
