"""Types of the IR: scalars, tensors, memory buffers and functions.

Types are immutable and interned: two equal types are the same object, so
`is` and `==` agree and comparisons in hot verifier paths stay cheap.
Dialects add type kinds by subclassing `Type` and registering a parser for
their keyword with `register_type_parser`.
"""

from __future__ import annotations

import re
from typing import Callable, ClassVar

import numpy as np


class Type:
    """Base of all types. Subclasses are interned through `_interned`."""

    __slots__ = ("_key", "_text", "__weakref__")
    _cache: ClassVar[dict] = {}

    @classmethod
    def _interned(cls, *key):
        full_key = (cls, key)
        found = Type._cache.get(full_key)
        if found is None:
            found = object.__new__(cls)
            found._key = key
            found._text = None
            found._init(*key)
            Type._cache[full_key] = found
        return found

    def _init(self, *key):
        pass

    def __reduce__(self):
        return (type(self)._interned, self._key)

    def __str__(self) -> str:
        # Types are immutable and printed over and over: spell each once.
        if self._text is None:
            self._text = self._format()
        return self._text

    def _format(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return str(self)


# --------------------------------------------------------------------------- scalars


class ScalarType(Type):
    """An element type: floats, integers (i1 is the boolean) and `index`."""

    __slots__ = ("name", "bitwidth")

    def __new__(cls, name: str, bitwidth: int):
        return cls._interned(name, bitwidth)

    def _init(self, name, bitwidth):
        self.name = name
        self.bitwidth = bitwidth

    def _format(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return isinstance(self, FloatType)

    @property
    def is_integer(self) -> bool:
        return isinstance(self, (IntegerType, IndexType))

    @property
    def is_bool(self) -> bool:
        return self is i1

    @property
    def byte_size(self) -> int:
        return max(1, self.bitwidth // 8)

    @property
    def numpy_dtype(self) -> np.dtype:
        """The numpy dtype that stores values of this type.

        bf16 has no numpy dtype: it is stored widened to float32, with its
        values rounded to bf16 precision by whoever produces them.
        """
        return _NUMPY_DTYPES[self.name]


class FloatType(ScalarType):
    __slots__ = ()


class IntegerType(ScalarType):
    __slots__ = ()


class IndexType(ScalarType):
    __slots__ = ()


f16 = FloatType("f16", 16)
bf16 = FloatType("bf16", 16)
f32 = FloatType("f32", 32)
f64 = FloatType("f64", 64)
i1 = IntegerType("i1", 1)
i8 = IntegerType("i8", 8)
i32 = IntegerType("i32", 32)
i64 = IntegerType("i64", 64)
index = IndexType("index", 64)

SCALAR_TYPES: dict[str, ScalarType] = {
    t.name: t for t in (f16, bf16, f32, f64, i1, i8, i32, i64, index)
}

_NUMPY_DTYPES = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.float32),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "i1": np.dtype(np.bool_),
    "i8": np.dtype(np.int8),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "index": np.dtype(np.int64),
}


def round_to_bf16(x) -> np.ndarray:
    """float32 values rounded to bf16 precision (nearest even), kept as float32.

    bf16 is stored widened to float32 everywhere (numpy has no bf16), so
    whoever produces bf16 values rounds them with this.
    """
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), rounded)


# --------------------------------------------------------------------------- shaped types


class ShapedType(Type):
    """A type with a shape and an element type. A dim is an int or, when
    only the run knows it, a sympy expression of the function's dim symbols
    (compiler/dims.py); then `num_elements` and `byte_size` are expressions."""

    __slots__ = ("shape", "element_type")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def num_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def byte_size(self) -> int:
        return self.num_elements * self.element_type.byte_size

    @property
    def is_static(self) -> bool:
        """Whether every dim is a known size (no `?`; compiler/dims.py)."""
        return all(type(d) is int for d in self.shape)

    def _shape_prefix(self) -> str:
        # A dynamic dim is a sympy expression (compiler/dims.py); it prints as `?`.
        return "".join("?x" if hasattr(d, "free_symbols") else f"{d}x" for d in self.shape)


class TensorType(ShapedType):
    """`tensor<4x8xf32>`: an immutable value with a static shape."""

    __slots__ = ()

    def __new__(cls, shape, element_type: ScalarType):
        shape = tuple(shape)
        if not all(type(d) is int for d in shape):
            shape = _normalized_shape(shape)
        return cls._interned(shape, element_type)

    def _init(self, shape, element_type):
        self.shape = shape
        self.element_type = element_type

    def with_shape(self, shape) -> "TensorType":
        return TensorType(shape, self.element_type)

    def with_element_type(self, element_type: ScalarType) -> "TensorType":
        return TensorType(self.shape, element_type)

    def _format(self) -> str:
        return f"tensor<{self._shape_prefix()}{self.element_type}>"


def _normalized_shape(shape: tuple) -> tuple:
    from fusecc.compiler.dims import normalize_dim

    return tuple(normalize_dim(d) for d in shape)


MEMORY_SPACES = ("global", "shared", "local")


class MemRefType(ShapedType):
    """`memref<128x64xf32, shared>`: a buffer in a memory space.

    Buffers are dense and row-major. `global` is device (or host) memory,
    `shared` is per-block scratchpad, `local` is per-thread (registers).
    """

    __slots__ = ("memory_space",)

    def __new__(cls, shape, element_type: ScalarType, memory_space: str = "global"):
        return cls._interned(tuple(shape), element_type, memory_space)

    def _init(self, shape, element_type, memory_space):
        self.shape = shape
        self.element_type = element_type
        self.memory_space = memory_space

    @property
    def dynamic_axes(self) -> tuple[int, ...]:
        """The axes whose size is `?`: known per call, carried by the buffer
        value at run time (docs/dynamic-shapes.md, below the tensor level)."""
        return tuple(axis for axis, d in enumerate(self.shape) if type(d) is not int)

    @property
    def has_dynamic_shape(self) -> bool:
        return any(type(d) is not int for d in self.shape)

    def with_sizes(self, sizes) -> "MemRefType":
        """This type with each `?` replaced by the next of `sizes`."""
        sizes = iter(sizes)
        return MemRefType([d if type(d) is int else int(next(sizes)) for d in self.shape], self.element_type, self.memory_space)

    def _format(self) -> str:
        space = "" if self.memory_space == "global" else f", {self.memory_space}"
        return f"memref<{self._shape_prefix()}{self.element_type}{space}>"


class FunctionType(Type):
    """`(tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>`."""

    __slots__ = ("inputs", "results")

    def __new__(cls, inputs, results):
        return cls._interned(tuple(inputs), tuple(results))

    def _init(self, inputs, results):
        self.inputs = inputs
        self.results = results

    def _format(self) -> str:
        return f"({', '.join(map(str, self.inputs))}) -> {format_result_types(self.results)}"


def format_result_types(types) -> str:
    """Results print bare when there is exactly one non-function type."""
    if len(types) == 1 and not isinstance(types[0], FunctionType):
        return str(types[0])
    return f"({', '.join(map(str, types))})"


# --------------------------------------------------------------------------- parsing


class TypeSyntaxError(ValueError):
    """A type spelled wrongly; `offset` points into the type's text."""

    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


_SHAPED_BODY = re.compile(r"^((?:(?:\d+|\?)x)*)([a-z][a-z0-9]*)(?:\s*,\s*([a-z]+))?$")

TypeParser = Callable[[str], Type]
_TYPE_PARSERS: dict[str, TypeParser] = {}


def register_type_parser(keyword: str, parse: TypeParser) -> None:
    """Let `keyword<...>` be read by `parse`, which receives the text inside <>."""
    _TYPE_PARSERS[keyword] = parse


def _parse_shape_and_element(body: str, keyword: str) -> tuple[tuple[int, ...], ScalarType, str | None]:
    match = _SHAPED_BODY.match(body.strip())
    if not match:
        raise TypeSyntaxError(f"malformed {keyword} type '{keyword}<{body}>'")
    dims, element_name, extra = match.groups()
    element = SCALAR_TYPES.get(element_name)
    if element is None:
        raise TypeSyntaxError(f"unknown element type '{element_name}' in '{keyword}<{body}>'")
    shape = tuple(_read_dim(d) for d in dims.split("x")[:-1]) if dims else ()
    return shape, element, extra


def _read_dim(text: str):
    if text != "?":
        return int(text)
    from fusecc.compiler.dims import unbound_dim

    return unbound_dim()


def _parse_tensor(body: str) -> Type:
    shape, element, extra = _parse_shape_and_element(body, "tensor")
    if extra is not None:
        raise TypeSyntaxError(f"tensor types take no memory space: 'tensor<{body}>'")
    return TensorType(shape, element)


def _parse_memref(body: str) -> Type:
    shape, element, space = _parse_shape_and_element(body, "memref")
    space = space or "global"
    if space not in MEMORY_SPACES:
        raise TypeSyntaxError(f"unknown memory space '{space}'; expected one of {', '.join(MEMORY_SPACES)}")
    return MemRefType(shape, element, space)


register_type_parser("tensor", _parse_tensor)
register_type_parser("memref", _parse_memref)

_parsed_types: dict[str, Type] = {}


def parse_type_token(text: str) -> Type:
    """Read one lexed type token such as `f32` or `tensor<4x8xf32>`.

    Results are memoised by spelling: real programs repeat few types many
    times, and this keeps type reading off the parser's profile.
    """
    found = _parsed_types.get(text)
    if found is not None:
        return found
    scalar = SCALAR_TYPES.get(text)
    if scalar is not None:
        return scalar
    keyword, _, rest = text.partition("<")
    if not rest.endswith(">") or keyword not in _TYPE_PARSERS:
        raise TypeSyntaxError(f"unknown type '{text}'")
    parsed = _TYPE_PARSERS[keyword](rest[:-1])
    _parsed_types[text] = parsed
    return parsed


# --------------------------------------------------------------------------- compatibility


def dim_compatible(actual, declared) -> bool:
    """A dim as computed fits a dim as written: equal, or either is `?`."""
    from fusecc.compiler.dims import dims_equal, is_unbound

    if type(declared) is not int and is_unbound(declared):
        return True
    if type(actual) is not int and is_unbound(actual):
        return True
    return dims_equal(actual, declared) is True


def type_compatible(actual: Type, declared: Type) -> bool:
    """`actual` may stand where `declared` is written (`?` matches any dim)."""
    if actual is declared:
        return True
    if not (isinstance(actual, TensorType) and isinstance(declared, TensorType)):
        return False
    return (
        actual.element_type is declared.element_type
        and actual.rank == declared.rank
        and all(dim_compatible(a, d) for a, d in zip(actual.shape, declared.shape))
    )


# --------------------------------------------------------------------------- broadcasting


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """numpy's broadcasting, or None when the shapes do not broadcast.

    A dynamic dim never stretches (docs/dynamic-shapes.md): against 1 it
    stays, against a size or another dynamic dim the two must be equal,
    which `dims.require_equal` turns into a runtime check."""
    if not all(type(d) is int for shape in shapes for d in shape):
        return _broadcast_dynamic(shapes)
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(rank):
        size = 1
        for shape in shapes:
            offset = axis - (rank - len(shape))
            if offset < 0:
                continue
            d = shape[offset]
            if d == 1:
                continue
            if size != 1 and d != size:
                return None
            size = d
        result.append(size)
    return tuple(result)


def _broadcast_dynamic(shapes) -> tuple | None:
    from fusecc.compiler.dims import dims_equal, require_equal

    rank = max(len(s) for s in shapes)
    result = []
    for axis in range(rank):
        size = 1
        for shape in shapes:
            offset = axis - (rank - len(shape))
            if offset < 0 or shape[offset] == 1:
                continue
            d = shape[offset]
            if type(size) is int and size == 1:
                size = d
                continue
            if dims_equal(size, d) is False:
                return None
            require_equal(size, d, f"broadcast dims of axis {axis} must be equal")
            if type(d) is int:
                size = d  # the static size is what the check proves
        result.append(size)
    return tuple(result)
