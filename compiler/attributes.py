"""Typed attributes: compile-time constants attached to operations.

Every attribute carries a Python `value` and, where MLIR gives it one, a
type. Attributes are immutable and compare by value.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusecc.compiler.types import FunctionType, ScalarType, ShapedType, TensorType, Type, bf16, f32, i1, i64, round_to_bf16


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
        text = format_float(self.value, self.type)
        # Untyped floats mean f32, but an untyped hex literal means an integer.
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


def _immutable(array: np.ndarray) -> bool:
    """Whether nothing can change the array's values: a contiguous read-only
    view, through read-only arrays only, of a bytes object."""
    if not (array.flags.c_contiguous and array.flags.aligned):
        return False
    base = array
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    return isinstance(base, bytes)


class DenseElementsAttr(Attribute):
    """`dense<...> : tensor<...>`: a constant tensor held as a numpy array.

    The array's dtype is the element type's storage dtype (bf16 values are
    rounded to bf16 and stored as float32); it is read-only so that sharing
    one attribute between ops is safe.
    """

    __slots__ = ("type", "array", "_hash", "_splat")

    # Above this many elements the printer uses MLIR's hex form, which is
    # exact and keeps large weights from flooding the output.
    HEX_THRESHOLD = 64

    def __init__(self, array: np.ndarray, type: ShapedType):
        array = np.asarray(array, dtype=type.element_type.numpy_dtype)
        if type.element_type is bf16:
            array = round_to_bf16(array)
        if array.size == 1 and array.shape != tuple(type.shape):
            # A splat stays one element broadcast to the shape (a read-only
            # view): `dense<0.5> : tensor<4096x4096xf32>` costs 4 bytes.
            array = np.broadcast_to(array.reshape(()), type.shape)
            self._splat = array.size > 0  # an empty tensor has no splat value
        else:
            if array.shape != tuple(type.shape):
                array = np.broadcast_to(array, type.shape)
            if not _immutable(array):  # (a model's weights read from its file are not copied again)
                array = np.array(array, copy=True)
                array.flags.writeable = False
            self._splat = None
        self.type = type
        self.array = array
        self._hash = None

    @property
    def value(self) -> np.ndarray:
        return self.array

    @property
    def is_splat(self) -> bool:
        if self._splat is None:
            flat = self.array.reshape(-1)
            # Two elements that differ settle it without a pass over a weight's megabytes.
            self._splat = flat.size > 0 and bool(flat[-1] == flat[0]) and bool(flat[flat.size // 2] == flat[0]) and bool(np.all(flat == flat[0]))
        return self._splat

    def splat_value(self):
        return self.array.flat[0].item()

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, DenseElementsAttr)
            and self.type is other.type
            and np.array_equal(self.array, other.array, equal_nan=self.array.dtype.kind == "f")
        )

    def __hash__(self) -> int:
        if self._hash is None:
            # Equal arrays have equal samples: hashing at most ~4096 evenly
            # spaced elements keeps a weight's megabytes out of CSE's hashing.
            flat = self.array.reshape(-1)
            content = self.splat_value() if self.is_splat else flat[:: max(1, flat.size // 4096)].tobytes()
            self._hash = hash((self.type, content))
        return self._hash

    def __str__(self) -> str:
        return f"dense<{self.format_body()}> : {self.type}"

    def format_body(self) -> str:
        if self.array.size == 0:
            return ""
        if self.is_splat:
            return format_element(self.splat_value(), self.type.element_type)
        if self.array.size > self.HEX_THRESHOLD:
            return f'"0x{elements_to_bytes(self.array, self.type.element_type).hex().upper()}"'
        return _format_nested(self.array, self.type.element_type)


class DenseResourceElementsAttr(DenseElementsAttr):
    """`dense_resource<name> : tensor<...>`: a constant whose elements live in
    a resource file that the module names (compiler/resources.py), MLIR's
    way of keeping large weights out of the text.

    `array` is a read-only view of the mapped file (a copy only where the
    file's layout differs from the storage dtype: bf16, big-endian npy).
    Everything that reads a DenseElementsAttr's array reads this one; the
    printer writes the name, not the elements. A resource is never treated
    as a splat: finding out would read every page of it.
    """

    __slots__ = ("name", "source")

    def __init__(self, name: str, array: np.ndarray, type: ShapedType, source: str = ""):
        if array.shape != tuple(type.shape) or array.dtype != type.element_type.numpy_dtype:
            raise ValueError(f"resource '{name}' has {array.dtype}{list(array.shape)}, not the elements of {type}")
        self.name = name
        self.source = source  # the resolved file, with its size and mtime: identifies the content
        self.type = type
        self.array = array
        self._hash = None
        self._splat = False

    def __eq__(self, other) -> bool:
        if isinstance(other, DenseResourceElementsAttr):
            return self is other or (self.type is other.type and self.name == other.name and self.source == other.source)
        return False

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((self.type, self.name, self.source))
        return self._hash

    def __str__(self) -> str:
        return f"dense_resource<{format_resource_name(self.name)}> : {self.type}"


_BARE_RESOURCE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*")


def format_resource_name(name: str) -> str:
    """A resource name as the parser reads it: bare when it is an identifier, else quoted."""
    return name if _BARE_RESOURCE_NAME.fullmatch(name) and name not in ("true", "false", "unit", "dense") else quote_string(name)


def elements_to_bytes(array: np.ndarray, element_type: ScalarType) -> bytes:
    """MLIR's raw little-endian layout of a dense hex blob (bf16 as 2 bytes)."""
    if element_type is bf16:
        return (np.ascontiguousarray(array, dtype=np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    return np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()


def elements_from_bytes(raw: bytes, element_type: ScalarType) -> np.ndarray:
    """Inverse of `elements_to_bytes`, flat; ValueError when `raw` has a ragged length."""
    if element_type is bf16:
        return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    dtype = element_type.numpy_dtype
    return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype)


def _format_nested(array: np.ndarray, element_type: ScalarType) -> str:
    if array.ndim == 0:
        return format_element(array.item(), element_type)
    return "[" + ", ".join(_format_nested(sub, element_type) for sub in array) + "]"


def format_element(value, element_type: ScalarType) -> str:
    """One element of a dense literal, as short as its storage precision allows."""
    if element_type is i1:
        return "true" if value else "false"
    if element_type.is_float:
        return format_float(value, element_type, shortest=True)
    return str(int(value))


_SHORTEST_DTYPE = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


def _shortest_bf16(value: float) -> str:
    """Fewest digits that read back (rounded to bf16) as the same bf16 value."""
    target = round_to_bf16(np.float32(value))
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if round_to_bf16(np.float32(float(text))) == target:
            return text
    return repr(float(np.float32(value)))


def format_float(value: float, type: ScalarType = f32, shortest: bool = False) -> str:
    """MLIR's spelling of a float of `type`, always with a '.' or an exponent.

    The text reads back to the same Python float, or with `shortest` to the
    same value at the type's storage precision. Infinities and NaN have no
    decimal spelling in MLIR, so they print as the type's bit pattern in hex
    (`0x7F800000` for f32, `0x7C00` for f16, `0x7F80` for bf16).
    """
    value = float(value)
    if not math.isfinite(value):
        return f"0x{float_to_bits(value, type):0{type.bitwidth // 4}X}"
    if not shortest:
        text = repr(value)
    elif type is bf16:
        text = _shortest_bf16(value)
    else:
        text = str(_SHORTEST_DTYPE[type.name](value))
    mantissa, e, exponent = text.lower().partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}e{exponent}" if e else mantissa


def float_to_bits(value: float, type: ScalarType) -> int:
    if type.name == "f64":
        return int(np.array(value, dtype=np.float64).view(np.uint64))
    if type.name == "f16":
        return int(np.array(value, dtype=np.float16).view(np.uint16))
    bits = int(np.array(value, dtype=np.float32).view(np.uint32))
    return bits >> 16 if type is bf16 else bits


def float_from_bits(bits: int, type: ScalarType) -> float:
    """The float whose bit pattern is `bits`; ValueError when it does not fit the type."""
    if not 0 <= bits < 1 << type.bitwidth:
        raise ValueError(f"hex literal 0x{bits:X} has more than {type.bitwidth} bits for {type}")
    if type.name == "f64":
        return float(np.array(bits, dtype=np.uint64).view(np.float64))
    if type.name == "f16":
        return float(np.array(bits, dtype=np.uint16).view(np.float16))
    if type is bf16:
        bits <<= 16
    return float(np.array(bits, dtype=np.uint32).view(np.float32))


def integer_in_range(value: int, type: ScalarType) -> bool:
    """Whether `value` fits the signed storage of the integer `type` (i1: 0 or 1)."""
    if type.bitwidth == 1:
        return value in (0, 1)
    limit = 1 << (type.bitwidth - 1)
    return -limit <= value < limit


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
    """Inverse of `quote_string`; `token` includes its quotes. Raises
    ValueError for an escape other than \\" \\\\ \\n \\t or two hex digits."""
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
            digits = body[i + 1 : i + 3]
            if len(digits) != 2 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"invalid escape '\\{digits}' in string; use \\n, \\t, \\\\, \\\" or two hex digits")
            out.append(chr(int(digits, 16)))
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
    "DenseResourceElementsAttr",
    "FloatAttr",
    "FunctionType",
    "IntegerAttr",
    "StringAttr",
    "SymbolRefAttr",
    "TypeAttr",
    "UnitAttr",
    "dense",
    "elements_from_bytes",
    "elements_to_bytes",
    "float_from_bits",
    "float_to_bits",
    "format_element",
    "format_float",
    "format_resource_name",
    "integer_in_range",
    "from_python",
    "quote_string",
    "unquote_string",
]
