"""C text for the CUDA backend: storage types, exact literals, identifiers
and their scopes, source locations, and constant data arrays."""

from __future__ import annotations

import math
import re

import numpy as np

from fusecc.compiler.diagnostics import FileLineColLoc, FusedLoc, Location, NameLoc
from fusecc.compiler.types import MemRefType, ScalarType, bf16, f16, f32, f64, i1, i8, i32, i64, index
from fusecc.dialects import loop


class EmitError(Exception):
    """The loop IR uses something the CUDA backend cannot express (an
    internal error: the lowering or legalize should not produce it)."""

INT32_MAX = 2**31 - 1

C_STORAGE = {f16: "__half", bf16: "__nv_bfloat16", f32: "float", f64: "double", i1: "bool", i8: "signed char", i32: "int", i64: "long long"}
LOAD_CONVERSION = {f16: "__half2float", bf16: "__bfloat162float"}
STORE_CONVERSION = {f16: "__float2half_rn", bf16: "__float2bfloat16_rn"}


def is_reduced_float(t) -> bool:
    return t is f16 or t is bf16


def float_literal(value: float, t: ScalarType) -> str:
    """An exact C spelling of `value` as a `t` (f16/bf16 values are exact in f32)."""
    if t is f64:
        if math.isinf(value) or math.isnan(value):
            bits = np.array(value, dtype=np.float64).view(np.uint64).item()
            return f"__longlong_as_double((long long)0x{bits:016x}ull)"
        text = repr(float(value))
        text = text if any(c in text for c in ".e") else text + ".0"
        return f"({text})" if text.startswith("-") else text
    single = np.float32(value)
    if np.isinf(single):
        return "FUSECC_POS_INF" if single > 0 else "FUSECC_NEG_INF"  # from the prelude
    if np.isnan(single):
        return f"__int_as_float(0x{single.view(np.uint32).item():08x})"
    text = np.format_float_positional(single, unique=True, trim="0") if 1e-4 <= abs(single) < 1e8 or single == 0 else np.format_float_scientific(single, unique=True, trim="0")
    if text.startswith("-0") and single == 0:
        text = "-0.0"
    if "." not in text and "e" not in text:
        text += ".0"
    return f"({text}f)" if text.startswith("-") else text + "f"


def int_literal(value: int, c_type: str) -> str:
    value = int(value)
    if c_type == "bool":
        return "true" if value else "false"
    wide = c_type == "long long"
    if value == -(2**63) and wide:
        return "(-9223372036854775807LL - 1)"
    if value == -(2**31) and not wide:
        return "(-2147483647 - 1)"
    text = str(value) + ("LL" if wide and not -(2**31) <= value <= INT32_MAX else "")
    return f"({text})" if value < 0 else text


# --------------------------------------------------------------------------- names

C_RESERVED = frozenset(
    """alignas alignof and asm auto bool break case catch char class const constexpr continue default delete do double
    else enum explicit export extern false float for friend goto if inline int long mutable namespace new noexcept not
    nullptr operator or private protected public register restrict return short signed sizeof static struct switch
    template this throw true try typedef typeid typename union unsigned using virtual void volatile while xor
    threadIdx blockIdx blockDim gridDim warpSize half nv_bfloat16 min max abs exp log sqrt tanh erf pow main
    expf logf sqrtf rsqrtf rsqrt tanhf erff fabsf fabs powf fmaxf fminf fmax fmin""".split()
)


def c_identifier(hint: str | None) -> str | None:
    if not hint or hint.isdigit():
        return None
    name = re.sub(r"[^A-Za-z0-9_]", "_", hint)
    name = name.lstrip("_") or None
    if name is None:
        return None
    if name[0].isdigit():
        name = "v" + name
    if name in C_RESERVED or name.startswith("fusecc"):
        name += "_"
    return name


class ScopedNames:
    """C names for SSA values: unique among the names visible where they are
    declared, so sibling scopes may reuse short names like `v`."""

    def __init__(self, taken_globally: set[str]):
        self.scopes: list[set[str]] = [taken_globally, set()]  # file scope (shared, by reference), then the kernel's
        self.counters: dict[str, int] = {}

    def push(self) -> None:
        self.scopes.append(set())

    def pop(self) -> None:
        self.scopes.pop()

    def visible(self, name: str) -> bool:
        return any(name in scope for scope in self.scopes)

    def claim(self, base: str) -> str:
        name, suffix = base, 1
        while self.visible(name):
            name = f"{base}_{suffix}"
            suffix += 1
        self.scopes[-1].add(name)
        return name

    def fresh(self, prefix: str) -> str:
        while True:
            n = self.counters.get(prefix, 0)
            self.counters[prefix] = n + 1
            name = f"{prefix}{n}"
            if not self.visible(name):
                self.scopes[-1].add(name)
                return name


def anonymous_prefix(t) -> str:
    if isinstance(t, MemRefType):
        return "buf"
    if t is i1:
        return "p"
    if t.is_float:
        return "v"
    return "i"


# --------------------------------------------------------------------------- locations


def format_location(loc: Location) -> list[str]:
    """`file:line:col` of every concrete position in `loc`."""
    if isinstance(loc, FileLineColLoc):
        return [f"{loc.file}:{loc.line}:{loc.col}"]
    if isinstance(loc, FusedLoc):
        return [text for part in loc.locations for text in format_location(part)]
    if isinstance(loc, NameLoc):
        inner = format_location(loc.child) if loc.child else []
        return [f"{loc.name} ({', '.join(inner)})" if inner else loc.name]
    return []



# --------------------------------------------------------------------------- constant data


def unique_global(base: str, taken: set[str]) -> str:
    name, suffix = base, 1
    while name in taken:
        name, suffix = f"{base}_{suffix}", suffix + 1
    taken.add(name)
    return name


def constant_array(name: str, op: loop.ConstantOp, comment: str) -> tuple[list[str], str]:
    """`static __device__ const T name[n] = {...};` holding `op`'s value, and
    the C expression that reads it. f16/bf16 data is kept as exact f32
    values: loads need no conversion. Data with infinities or NaNs is kept
    as bit patterns (NVRTC has no constant expression for them) and read
    through a pointer cast."""
    t = op.result.type
    element = t.element_type
    c_type = "float" if is_reduced_float(element) else "long long" if element is index else C_STORAGE[element]
    values = np.asarray(op.attr("value").array).reshape(-1)
    expr = name
    if element.is_float and not np.all(np.isfinite(values)):
        wide = element is f64
        bits = values.astype(np.float64 if wide else np.float32).view(np.uint64 if wide else np.uint32)
        items = [f"0x{int(b):0{16 if wide else 8}x}{'ull' if wide else 'u'}" for b in bits]
        expr = f"reinterpret_cast<const {c_type}*>({name})"
        c_type = "unsigned long long" if wide else "unsigned int"
    elif element.is_float:
        items = [float_literal(float(v), f64 if element is f64 else f32) for v in values]
    else:
        items = [int_literal(int(v), c_type) for v in values]
    lines = [f"// {t}, {comment}", f"static __device__ const {c_type} {name}[{max(len(items), 1)}] = {{"]
    for start in range(0, len(items), 8):
        lines.append("    " + ", ".join(items[start : start + 8]) + ",")
    return lines + (["    0,"] if not items else []) + ["};"], expr

