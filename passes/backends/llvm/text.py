"""LLVM IR as text: type spellings, literals, and the module/function
builders the CPU backend writes into. bf16 values live in `float` registers
(exactly representable values, docs/legalize.md) and are stored as i16; i1
is stored as i8."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from fusecc.compiler.types import MemRefType, ScalarType, bf16, i1, round_to_bf16
from fusecc.passes.backends.llvm import math_functions as llvm_math

REGISTER = {"f32": "float", "f64": "double", "f16": "half", "bf16": "float", "i1": "i1", "i8": "i8", "i32": "i32", "i64": "i64", "index": "i64"}
STORAGE = dict(REGISTER, bf16="i16", i1="i8")
MANGLE = {"float": "f32", "double": "f64", "half": "f16", "i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "ptr": "p0"}
BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64}


def float_literal(value, scalar: str) -> str:
    if scalar == "half":
        return "0xH%04X" % int(np.array([value], dtype=np.float16).view(np.uint16)[0])
    if scalar == "float":
        return llvm_math.f32_literal(value)
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(value)))[0]


def vty(scalar: str, width: int) -> str:
    return scalar if width == 1 else f"<{width} x {scalar}>"


def mangle(scalar: str, width: int) -> str:
    return MANGLE[scalar] if width == 1 else f"v{width}{MANGLE[scalar]}"


def is_literal(ref: str) -> bool:
    return not ref.startswith("%")


class ModuleBuilder:
    def __init__(self):
        self.functions: list[str] = []
        self.globals: list[str] = []
        self.declarations: dict[str, str] = {}
        self.metadata: list[str] = []
        self.attribute_groups: dict[str, str] = {"nounwind": "#0"}  # attributes -> group

    def attribute_group(self, attributes: str) -> str:
        """The group (`#N`) of a function with these attributes."""
        return self.attribute_groups.setdefault(attributes, f"#{len(self.attribute_groups)}")

    def declare(self, name: str, ret: str, arg_types) -> str:
        if name not in self.declarations:
            self.declarations[name] = f"declare {ret} @{name}({', '.join(arg_types)})"
        return f"@{name}"

    def loop_metadata(self, vectorize: bool | None = True, unroll: int | None = None) -> str:
        """A loop ID: ask LLVM's loop vectoriser to vectorise (True), forbid it
        (False) or leave it to its heuristics (None), and/or to unroll
        `unroll` times (`loop.for {unroll = N}`)."""
        loop_id = len(self.metadata)
        properties = []
        if vectorize is not None:
            properties.append(f'!{{!"llvm.loop.vectorize.enable", i1 {str(vectorize).lower()}}}')
        if unroll:
            properties.append(f'!{{!"llvm.loop.unroll.count", i32 {unroll}}}')
        ids = [f"!{loop_id + 1 + k}" for k in range(len(properties))]
        self.metadata.append(f"!{loop_id} = distinct !{{!{loop_id}, {', '.join(ids)}}}")
        self.metadata += [f"{name} = {text}" for name, text in zip(ids, properties)]
        return f"!{loop_id}"

    def text(self) -> str:
        parts = ["; fusecc: loop-level kernels for the CPU", ""]
        parts += self.globals + ([""] if self.globals else [])
        parts += self.functions
        parts += sorted(self.declarations.values())
        parts += [""] + [f"attributes {group} = {{ {attributes} }}" for attributes, group in self.attribute_groups.items()]
        parts += self.metadata
        return "\n".join(parts) + "\n"


class FunctionBuilder:
    def __init__(self, mb: ModuleBuilder):
        self.mb = mb
        self.allocas: list[str] = []
        self.lines: list[str] = []
        self.count = 0
        self.block = "entry"

    def fresh(self, hint: str = "v") -> str:
        self.count += 1
        return f"%{hint}{self.count}"

    def emit(self, rhs: str, hint: str = "v") -> str:
        name = self.fresh(hint)
        self.lines.append(f"  {name} = {rhs}")
        return name

    def do(self, text: str) -> None:
        self.lines.append(f"  {text}")

    def label(self, hint: str) -> str:
        self.count += 1
        return f"{hint}{self.count}"

    def begin(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.block = label

    def br(self, label: str, suffix: str = "") -> None:
        self.do(f"br label %{label}{suffix}")

    def cond_br(self, cond: str, then: str, otherwise: str) -> None:
        self.do(f"br i1 {cond}, label %{then}, label %{otherwise}")

    def placeholder(self) -> int:
        self.lines.append("")
        return len(self.lines) - 1

    def intrinsic(self, name: str, ret: str, arg_types) -> str:
        return self.mb.declare(name, ret, arg_types)

    def call(self, name: str, ret: str, args: list[tuple[str, str]]) -> str:
        callee = self.intrinsic(name, ret, [t.split(" align ")[0] for t, _ in args])
        text = f"call {ret} {callee}({', '.join(f'{t} {a}' for t, a in args)})"
        if ret == "void":
            self.do(text)
            return ""
        return self.emit(text)


# --------------------------------------------------------------------------- values


def scalar_literal(value, t: ScalarType) -> str:
    """A register literal of `value` as a `t`."""
    if t is i1:
        return "true" if value else "false"
    if t.is_float:
        if t is bf16:
            value = float(round_to_bf16(np.array([value], dtype=np.float32))[0])
        return float_literal(value, REGISTER[t.name])
    return str(int(value))


def storage_literal(t: ScalarType, register_literal: str) -> str:
    """A register literal in the buffer's storage type."""
    if t is bf16:
        value = struct.unpack("<d", struct.pack("<Q", int(register_literal, 16)))[0]
        return str(int(np.array([value], dtype=np.float32).view(np.uint32)[0] >> 16))
    if t is i1:
        return "1" if register_literal == "true" else "0"
    return register_literal


def constant_bytes(array, t: MemRefType) -> bytes:
    """A `loop.constant`'s data in its storage layout (little endian)."""
    if t.element_type is bf16:
        return (round_to_bf16(np.asarray(array, dtype=np.float32)).view(np.uint32) >> 16).astype("<u2").tobytes()
    return np.ascontiguousarray(array, dtype=np.dtype(t.element_type.numpy_dtype).newbyteorder("<")).tobytes()


# --------------------------------------------------------------------------- values


UNIFORM, LINEAR, VECTOR = 0, 1, 2


@dataclass(frozen=True)
class Val:
    """An emitted value. UNIFORM: one scalar for all lanes; VECTOR: `<W x ty>`;
    LINEAR (index only): `ref + stride * lane`, ref the scalar base.
    Index facts: the (base) value is a multiple of `multiple` (0: it is 0)
    and, with `nonneg`, not negative."""

    ref: str
    ty: str
    kind: int = UNIFORM
    stride: int = 0
    multiple: int = 1
    nonneg: bool = False
    const: object = None


def const_val(value: int, ty: str = "i64") -> Val:
    return Val(str(value), ty, multiple=abs(value), nonneg=value >= 0, const=value)


@dataclass(frozen=True)
class Buffer:
    ptr: str
    type: MemRefType
    align: int
    sizes: tuple | None = None  # a dynamic buffer's size per axis (Vals), passed after its pointer


def low_bit(n: int) -> int:
    """The largest power of two dividing n (a large one for 0)."""
    return n & -n if n else 1 << 30

