"""What a translation sees: the FX node, its arguments (numpy arrays for
what is known at import time, SSA values for the rest, Python numbers and
lists as they are) and a builder that places tensor-dialect ops at the
node's location in the user's Python source."""

from __future__ import annotations

import math
import os
import re

import numpy as np
import torch

from fusecc.compiler import attributes as A
from fusecc.compiler.builder import Builder
from fusecc.compiler.diagnostics import FileLineColLoc, Location, NameLoc, UsageError
from fusecc.compiler.ir import Value, VerifyError
from fusecc.compiler.types import ScalarType, TensorType, bf16, f16, f32, i1, i32, i64
from fusecc.dialects import tensor as T

TORCH_ELEMENT_TYPES: dict[torch.dtype, ScalarType] = {
    torch.float32: f32, torch.float16: f16, torch.bfloat16: bf16, torch.int64: i64, torch.int32: i32, torch.bool: i1,
}
NUMPY_ELEMENT_TYPES = {np.dtype(np.float32): f32, np.dtype(np.float16): f16, np.dtype(np.int64): i64,
                       np.dtype(np.int32): i32, np.dtype(np.bool_): i1}
# Constants folded at import time (aten.full, arange, a causal mask, ...) larger than this are refused.
FOLD_BUDGET_BYTES = 256 << 20

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


class Unsupported(UsageError):
    """An FX node fusecc cannot translate; `op` names its type once for the
    log. A usage error: the model asks for what fusecc lacks (exit 1)."""

    def __init__(self, op: str, reason: str, location: Location | None = None):
        position = location.file_line_col() if location is not None else None
        where = f"{position.file}:{position.line}:{position.col}: " if position else ""
        super().__init__(f"{where}{op}: {reason}")
        self.op, self.reason, self.location = op, reason, location


def op_name(node) -> str:
    """`aten.mm.default`, `aten.add.Tensor`, `getitem`: the name users see in TORCH_LOGS."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._opname}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


def source_location(node) -> Location:
    """The node's innermost user frame (`file:line:col`, the column from the
    caret line Python prints under the expression) named after its aten op."""
    trace = node.meta.get("stack_trace") or ""
    lines = trace.rstrip().splitlines()
    frame, col = None, 1
    for i, line in enumerate(lines):
        found = _FRAME.search(line)
        if found and (frame is None or not found["file"].startswith(_TORCH_DIR)):  # torch.nn's own lines are not the user's
            frame, col = found, 1
            source = lines[i + 1] if i + 1 < len(lines) else ""
            carets = lines[i + 2] if i + 2 < len(lines) else ""
            if set(carets.strip()) <= set("^~") and carets.strip():
                col = len(carets) - len(carets.lstrip()) + 1
            elif source.strip():
                col = len(source) - len(source.lstrip()) + 1
    name = op_name(node)
    if frame is None:
        return NameLoc(name)
    return NameLoc(name, FileLineColLoc(frame["file"], int(frame["line"]), col))


def element_of_dtype(dtype, what: str = "a tensor") -> ScalarType:
    if isinstance(dtype, torch.dtype):
        found = TORCH_ELEMENT_TYPES.get(dtype)
    else:
        found = bf16 if np.dtype(dtype).name == "bfloat16" else NUMPY_ELEMENT_TYPES.get(np.dtype(dtype))  # ml_dtypes' bfloat16
    if found is None:
        raise Unsupported("dtype", f"{what} has dtype {dtype}, which the tensor dialect does not have")
    return found


def fake_value(node):
    """The FakeTensor Dynamo/export recorded for a node (its shape and dtype)."""
    return node.meta.get("val", node.meta.get("example_value"))


def dim_of(d, what: str):
    """A torch size as an IR dim: an int, or for a symbolic size (Dynamo's
    SymInt: `s0`, `s0*128`) the sympy expression over fusecc's dim symbols
    of the same names (compiler/dims.py). Sizes that come from data
    (unbacked, `u0`) are refused."""
    if not isinstance(d, torch.SymInt):
        return int(d)
    expr = d.node.expr
    symbols = expr.free_symbols
    if not all(s.name.startswith("s") for s in symbols):
        raise Unsupported("symbolic shape", f"{what} has a size that depends on the data ({d})")
    from fusecc.compiler.dims import dim_symbol, normalize_dim

    return normalize_dim(expr.xreplace({s: dim_symbol(s.name) for s in symbols}))


def shape_dims(val, what: str) -> tuple:
    """The dims of a FakeTensor: ints, and sympy expressions for Dynamo's symbolic sizes."""
    return tuple(dim_of(d, what) for d in val.shape)


def is_symbolic(entry) -> bool:
    """A size only the run knows (what a SymInt node stands for in the graph)."""
    return hasattr(entry, "free_symbols") and not isinstance(entry, (Value, np.ndarray))


Entry = np.ndarray | Value


class TranslationContext:
    """Builds the ops of one FX node after another."""

    def __init__(self, builder: Builder):
        self.builder = builder
        self.node = None
        self.location: Location = NameLoc("torch")
        self._materialized: dict[int, tuple[np.ndarray, Value]] = {}
        self.constant_names: dict[int, str] = {}  # id(array) -> SSA name (parameters keep theirs)

    def at(self, node) -> None:
        self.node = node
        self.location = source_location(node)

    def unsupported(self, reason: str) -> Unsupported:
        return Unsupported(op_name(self.node), reason, self.location)

    # --- what the node produces (from the FakeTensor) ----------------------------------
    def result_type(self, index: int | None = None) -> TensorType:
        val = fake_value(self.node)
        if index is not None:
            val = val[index]
        return TensorType(shape_dims(val, f"the result of {op_name(self.node)}"), element_of_dtype(val.dtype, "its result"))

    def result_is_static(self) -> bool:
        val = fake_value(self.node)
        vals = val if isinstance(val, (tuple, list)) else [val]
        return all(not isinstance(v, torch.Tensor) or all(isinstance(d, int) for d in v.shape) for v in vals)

    # --- values -------------------------------------------------------------------------
    def value(self, entry, like: ScalarType | None = None) -> Value:
        """An SSA value; arrays become `tensor.constant` once, Python numbers a
        0-d constant of `like`'s element type."""
        if isinstance(entry, Value):
            return entry
        if not isinstance(entry, np.ndarray):
            return self.scalar(entry, like or (f32 if isinstance(entry, float) else i64))
        cached = self._materialized.get(id(entry))
        if cached is not None and cached[0] is entry:
            return cached[1]
        if entry.dtype.name == "bfloat16":
            array, element = entry.astype(np.float32), bf16
        else:
            array, element = entry, element_of_dtype(entry.dtype)
        location = NameLoc(self.constant_names[id(entry)]) if id(entry) in self.constant_names else self.location
        op = self.builder.create(T.ConstantOp, [], {"value": A.DenseElementsAttr(array, TensorType(array.shape, element))}, location=location)
        if id(entry) in self.constant_names:
            op.result.name_hint = self.constant_names[id(entry)]
        self._materialized[id(entry)] = (entry, op.result)
        return op.result

    def scalar(self, number, element: ScalarType) -> Value:
        return self.value(np.asarray(number, dtype=element.numpy_dtype))

    def cast(self, x, element: ScalarType) -> Value:
        x = self.value(x, element)
        if x.type.element_type is element:
            return x
        return self.emit(T.CastOp, [x], result_type=x.type.with_element_type(element))

    def emit(self, op_class, operands, attributes=None, result_type=None) -> Value:
        values = [self.value(x) for x in operands]
        try:
            op = self.builder.create(op_class, values, attributes, None if result_type is None else [result_type], location=self.location)
        except VerifyError as exc:
            raise self.unsupported(f"{op_class.name}: {exc}") from None
        return op.result


def element_of(entry) -> ScalarType:
    if isinstance(entry, Value):
        return entry.type.element_type
    return element_of_dtype(np.asarray(entry).dtype)


def array_tensor(array: np.ndarray) -> torch.Tensor:
    """The array as a tensor sharing its memory (ml_dtypes' bfloat16 too)."""
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def shape_of(entry) -> tuple[int, ...]:
    return tuple(entry.type.shape) if isinstance(entry, Value) else tuple(np.shape(entry))


def check_fold_size(shape, itemsize: int) -> None:
    nbytes = math.prod(int(d) for d in shape) * itemsize
    if nbytes > FOLD_BUDGET_BYTES:
        raise Unsupported("constant", f"a {list(shape)} constant ({nbytes} bytes) is over the folding budget of {FOLD_BUDGET_BYTES}")


__all__ = ["TranslationContext", "array_tensor", "Unsupported", "element_of", "element_of_dtype", "fake_value", "op_name", "shape_of", "source_location",
           "dim_of", "is_symbolic", "shape_dims", "TORCH_ELEMENT_TYPES"]
