"""Typed attributes: compile-time constants attached to operations.

Every attribute carries a Python `value` and, where MLIR gives it one, a
type. Attributes are immutable and compare by value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .types import FunctionType, ScalarType, ShapedType, TensorType, Type, f32, i1, i64


class Attribute:
    """Base of all attributes."""

    __slots__ = ()
    value: Any

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self})"


@dataclass(frozen=True, eq=True, repr=False)
class IntegerAttr(Attribute):
    value: int
    type: ScalarType = i64

    def __str__(self) -> str:
        return str(self.value) if self.type is i64 else f"{self.value} : {self.type}"


@dataclass(frozen=True, eq=True, repr=False)
class FloatAttr(Attribute):
    value: float
    type: ScalarType = f32

    def __str__(self) -> str:
        text = format_float(self.value)
        # Hex (inf/nan) would read back as an integer without its type.
        return text if self.type is f32 and not text.startswith("0x") else f"{text} : {self.type}"


@dataclass(frozen=True, eq=True, repr=False)
class BoolAttr(Attribute):
    value: bool

    type = i1

    def __str__(self) -> str:
        return "true" if self.value else "false"


@dataclass(frozen=True, eq=True, repr=False)
class StringAttr(Attribute):
    value: str

    def __str__(self) -> str:
        return quote_string(self.value)


@dataclass(frozen=True, eq=True, repr=False)
class UnitAttr(Attribute):
    """Presence-only flag, printed as a bare key in an attribute dictionary."""

    value: bool = True

    def __str__(self) -> str:
        return "unit"


@dataclass(frozen=True, eq=True, repr=False)
class SymbolRefAttr(Attribute):
    value: str  # without the leading '@'

    def __str__(self) -> str:
        return f"@{self.value}"


@dataclass(frozen=True, eq=True, repr=False)
class TypeAttr(Attribute):
    value: Type

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True, eq=True, repr=False)
class ArrayAttr(Attribute):
    elements: tuple[Attribute, ...]

    @property
    def value(self) -> list:
        return [e.value for e in self.elements]

    def __str__(self) -> str:
        return f"[{', '.join(map(str, self.elements))}]"


class DenseElementsAttr(Attribute):
    """`dense<...> : tensor<...>`: a constant tensor held as a numpy array.

    The array's dtype is the element type's storage dtype; it is read-only so
    that sharing one attribute between ops is safe.
    """

    __slots__ = ("type", "array", "_hash")

    # Above this many elements the printer uses MLIR's hex form, which is
    # exact and keeps large weights from flooding the output.
    HEX_THRESHOLD = 64

    def __init__(self, array: np.ndarray, type: ShapedType):
        array = np.asarray(array, dtype=type.element_type.numpy_dtype)
        if array.shape != tuple(type.shape):
            array = np.broadcast_to(array, type.shape)
        array = np.array(array, copy=True)
        array.flags.writeable = False
        self.type = type
        self.array = array
        self._hash = None

    @property
    def value(self) -> np.ndarray:
        return self.array

    @property
    def is_splat(self) -> bool:
        flat = self.array.reshape(-1)
        return flat.size > 0 and bool(np.all(flat == flat[0]))

    def splat_value(self):
        return self.array.reshape(-1)[0].item()

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, DenseElementsAttr)
            and self.type is other.type
            and np.array_equal(self.array, other.array, equal_nan=self.array.dtype.kind == "f")
        )

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((self.type, self.array.tobytes()))
        return self._hash

    def __str__(self) -> str:
        return f"dense<{self.format_body()}> : {self.type}"

    def format_body(self) -> str:
        if self.is_splat:
            return format_element(self.splat_value(), self.type.element_type)
        if self.array.size > self.HEX_THRESHOLD:
            return f'"0x{self.array.astype(self.array.dtype.newbyteorder("<")).tobytes().hex().upper()}"'
        return _format_nested(self.array, self.type.element_type)


def _format_nested(array: np.ndarray, element_type: ScalarType) -> str:
    if array.ndim == 0:
        return format_element(array.item(), element_type)
    return "[" + ", ".join(_format_nested(sub, element_type) for sub in array) + "]"


def format_element(value, element_type: ScalarType) -> str:
    if element_type is i1:
        return "true" if value else "false"
    if element_type.is_float:
        if element_type.bitwidth == 32 and element_type.name == "f32":
            return format_float(float(np.float32(value)), single=True)
        return format_float(float(value))
    return str(int(value))


def format_float(value: float, single: bool = False) -> str:
    """Shortest text that reads back to the same value, always with a '.'.

    Infinities and NaN have no decimal spelling in MLIR, so they print as the
    f32 bit pattern in hex, which the parser reads back for float types.
    """
    if math.isinf(value) or math.isnan(value):
        return "0x" + np.array(value, dtype=np.float32).view(np.uint32).item().to_bytes(4, "big").hex().upper()
    text = str(np.float32(value)) if single else repr(float(value))
    if "e" in text or "E" in text:
        mantissa, _, exponent = text.lower().partition("e")
        if "." not in mantissa:
            mantissa += ".0"
        return f"{mantissa}e{exponent}"
    if "." not in text:
        text += ".0"
    return text


def quote_string(text: str) -> str:
    out = []
    for ch in text:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20:
            out.append(f"\\{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def unquote_string(token: str) -> str:
    """Inverse of `quote_string`; `token` includes its quotes."""
    body = token[1:-1]
    if "\\" not in body:
        return body
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in "\"\\":
            out.append(nxt)
            i += 2
        elif nxt == "n":
            out.append("\n")
            i += 2
        elif nxt == "t":
            out.append("\t")
            i += 2
        else:
            out.append(chr(int(body[i + 1 : i + 3], 16)))
            i += 3
    return "".join(out)


# --------------------------------------------------------------------------- helpers


def from_python(value: Any) -> Attribute:
    """Wrap a plain Python value into the attribute MLIR would use for it."""
    if isinstance(value, Attribute):
        return value
    if isinstance(value, bool):
        return BoolAttr(value)
    if isinstance(value, int):
        return IntegerAttr(value)
    if isinstance(value, float):
        return FloatAttr(value)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, Type):
        return TypeAttr(value)
    if isinstance(value, (list, tuple)):
        return ArrayAttr(tuple(from_python(v) for v in value))
    raise TypeError(f"no attribute for Python value {value!r}")


def dense(array, type: TensorType) -> DenseElementsAttr:
    return DenseElementsAttr(np.asarray(array), type)


__all__ = [
    "Attribute",
    "ArrayAttr",
    "BoolAttr",
    "DenseElementsAttr",
    "FloatAttr",
    "FunctionType",
    "IntegerAttr",
    "StringAttr",
    "SymbolRefAttr",
    "TypeAttr",
    "UnitAttr",
    "dense",
    "format_float",
    "from_python",
    "quote_string",
    "unquote_string",
]
