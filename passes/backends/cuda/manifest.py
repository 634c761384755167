"""kernels.json: how to run the kernels of a generated kernels.cu.

The driver writes it beside kernels.cu; the GPU runtime and the CPU harness
both execute a (manifest, source, inputs) triple with it (execute.py). The
schema is documented in docs/cuda-manifest.md; `Manifest.from_json`
validates a document against it and names the offending field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Union

from fusecc.passes.backends.cuda.manifest_dims import ManifestError, SizeArg, dim_sources, is_dynamic, validate_dynamic

SCHEMA_VERSION = 2  # 2 added `constants`; a document without constants is still written as version 1
DYNAMIC_VERSION = 3  # 3 added `?` sizes: expressions of named `dims`, `size` arguments, `checks` (manifest_dims.py)
READABLE_VERSIONS = (1, 2, 3)
MAX_THREADS_PER_BLOCK = 1024
# Dynamic shared memory a kernel may use without opting in; above it the host
# must raise the kernel's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first.
DEFAULT_DYNAMIC_SHARED_LIMIT = 48 * 1024
# What the generated source assumes of the compiler (NVRTC or nvcc), beside -arch.
COMPILE_OPTIONS = ("-std=c++17",)

# Element types (the IR's names) -> bytes per element on the device.
DTYPE_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i8": 1, "i1": 1}


class _ShapedBuffer:
    """A buffer described by `shape` and `dtype`, sized in bytes. A size may
    be an expression of the named dims (a string, version 3)."""

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(self.shape))

    @property
    def is_symbolic(self) -> bool:
        return any(isinstance(d, str) for d in self.shape)

    @property
    def nbytes(self) -> int:
        if self.is_symbolic:
            raise ManifestError(f"a buffer of shape {list(self.shape)} has no size before the dims are bound (manifest_dims.specialize)")
        return math.prod(self.shape) * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class TensorSpec(_ShapedBuffer):
    """A program input or output: its name, shape and element type."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


@dataclass(frozen=True)
class TensorArg:
    """A pointer to a program input or output, by name."""

    role: str  # "input" or "output"
    name: str

    def to_dict(self) -> dict:
        return {self.role: self.name}


@dataclass(frozen=True)
class ArenaArg(_ShapedBuffer):
    """A pointer to a temporary at a byte offset in the arena."""

    offset: int | str  # bytes; an expression of the dims in a dynamic manifest
    shape: tuple[int, ...]
    dtype: str

    def to_dict(self) -> dict:
        return {"arena": self.offset, "shape": list(self.shape), "dtype": self.dtype}


@dataclass(frozen=True)
class ScalarArg:
    """A scalar passed by value."""

    value: int | float
    dtype: str

    def to_dict(self) -> dict:
        return {"scalar": self.value, "dtype": self.dtype}


@dataclass(frozen=True)
class ConstantSpec(_ShapedBuffer):
    """A constant the runtime uploads once per program load: tensor `tensor`
    of the safetensors `file` (relative to the manifest's folder). `data`
    holds the values in memory when the manifest was built in this process."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    file: str
    tensor: str
    data: Any = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "file": self.file, "tensor": self.tensor}


@dataclass(frozen=True)
class ConstantArg:
    """A pointer to a constant of the manifest, by name."""

    name: str

    def to_dict(self) -> dict:
        return {"constant": self.name}


Arg = Union[TensorArg, ArenaArg, ScalarArg, ConstantArg, SizeArg]


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple  # ints, or expressions of the dims computed at launch (version 3)
    block: tuple[int, int, int]
    args: tuple[Arg, ...]
    shared_bytes: int = 0  # dynamic shared memory
    static_shared_bytes: int = 0  # the kernel's __shared__ arrays (informational: the loaded kernel knows it too)

    @property
    def shared_opt_in(self) -> bool:
        """The kernel must be allowed `shared_bytes` of dynamic shared memory
        before the launch: static + dynamic exceed the default 48 KiB."""
        return self.static_shared_bytes + self.shared_bytes > DEFAULT_DYNAMIC_SHARED_LIMIT

    def __post_init__(self):
        for name in ("grid", "block"):  # (x,), (x, y) and (x, y, z) are all fine
            dims = tuple(getattr(self, name))
            object.__setattr__(self, name, dims + (1,) * (3 - len(dims)))
        object.__setattr__(self, "args", tuple(self.args))

    def to_dict(self) -> dict:
        return {
            "kernel": self.kernel,
            "grid": list(self.grid),
            "block": list(self.block),
            "shared_bytes": self.shared_bytes,
            "static_shared_bytes": self.static_shared_bytes,
            "shared_opt_in": self.shared_opt_in,
            "args": [a.to_dict() for a in self.args],
        }


@dataclass(frozen=True)
class Manifest:
    source: str  # the .cu file's name, e.g. "kernels.cu"
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    launches: tuple[Launch, ...]
    arena_bytes: int | str = 0
    entry: str = "main"
    arch: str | None = None  # what the kernels were tiled for; they compile for any
    compile_options: tuple[str, ...] = COMPILE_OPTIONS  # give these to NVRTC/nvcc, with -arch
    constants: tuple[ConstantSpec, ...] = ()
    version: int | None = None  # None: the lowest version that can say what this manifest holds
    # Runtime dim checks shape inference left (compiler/dims.py): (lhs, rhs, where, message), expressions of the dims.
    checks: tuple[tuple[str, str, str, str], ...] = ()

    def __post_init__(self):
        for name in ("inputs", "outputs", "launches", "compile_options", "constants"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "checks", tuple(tuple(c) for c in self.checks))
        if self.version is None:
            object.__setattr__(self, "version", DYNAMIC_VERSION if self.is_dynamic else SCHEMA_VERSION if self.constants else 1)
        self.validate()

    @property
    def is_dynamic(self) -> bool:
        """Whether sizes are expressions of named dims, bound per call."""
        return is_dynamic(self)

    @property
    def dims(self) -> dict[str, tuple[str, int]]:
        """Each named dim -> (input, axis) that defines it: the first input
        axis whose size is the bare name."""
        return dim_sources(self)

    @property
    def kernel_names(self) -> list[str]:
        return list(dict.fromkeys(launch.kernel for launch in self.launches))

    def spec(self, name: str) -> TensorSpec:
        for spec in (*self.inputs, *self.outputs):
            if spec.name == name:
                return spec
        raise KeyError(name)

    def constant(self, name: str) -> ConstantSpec:
        for spec in self.constants:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def to_dict(self) -> dict:
        document = {
            "version": self.version,
            "source": self.source,
            "entry": self.entry,
            "arch": self.arch,
            "compile_options": list(self.compile_options),
            "arena_bytes": self.arena_bytes,
            "inputs": [s.to_dict() for s in self.inputs],
            "outputs": [s.to_dict() for s in self.outputs],
            "constants": [c.to_dict() for c in self.constants] if self.constants else None,
            "dims": [{"name": n, "input": i, "axis": a} for n, (i, a) in self.dims.items()] if self.is_dynamic else None,
            "checks": [dict(zip(("lhs", "rhs", "where", "message"), c)) for c in self.checks] if self.checks else None,
            "launches": [launch.to_dict() for launch in self.launches],
        }
        return {k: v for k, v in document.items() if v is not None}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ManifestError(f"kernels.json is not JSON: {exc}") from None
        return cls.from_dict(document)

    @classmethod
    def from_dict(cls, document: Any) -> "Manifest":
        return _Reader().manifest(document)

    def validate(self) -> None:
        """Check what the types cannot: names resolve, the arena holds every
        temporary, launches fit the hardware's limits."""
        if self.version not in READABLE_VERSIONS:
            raise ManifestError(f"version: this fusecc reads versions {', '.join(map(str, READABLE_VERSIONS))}, not {self.version}")
        if self.constants and self.version < 2:
            raise ManifestError(f"constants: need version 2, the document says {self.version}")
        constant_names = [c.name for c in self.constants]
        if len(set(constant_names)) != len(constant_names):
            raise ManifestError(f"constants: names must be unique, got {constant_names}")
        for i, constant in enumerate(self.constants):
            _check_dtype(constant.dtype, f"constants[{i}] ('{constant.name}')")
            if not constant.file or constant.file.startswith(("/", "\\")) or ".." in constant.file.replace("\\", "/").split("/"):
                raise ManifestError(f"constants[{i}] ('{constant.name}').file: '{constant.file}' must name a file inside the manifest's folder")
        names = [s.name for s in (*self.inputs, *self.outputs)]
        if len(set(names)) != len(names):
            raise ManifestError(f"inputs/outputs: names must be unique, got {names}")
        for spec in (*self.inputs, *self.outputs):
            _check_dtype(spec.dtype, f"tensor '{spec.name}'")
        if self.is_dynamic:
            if self.version < DYNAMIC_VERSION:
                raise ManifestError(f"sizes are expressions of dims: need version {DYNAMIC_VERSION}, the document says {self.version}")
            return validate_dynamic(self)
        if self.arena_bytes < 0:
            raise ManifestError("arena_bytes: must not be negative")
        roles = {s.name: "input" for s in self.inputs} | {s.name: "output" for s in self.outputs}
        for i, launch in enumerate(self.launches):
            where = f"launches[{i}] ({launch.kernel})"
            if any(d < 1 for d in (*launch.grid, *launch.block)) or len(launch.grid) != 3 or len(launch.block) != 3:
                raise ManifestError(f"{where}: grid and block need one to three positive sizes")
            if math.prod(launch.block) > MAX_THREADS_PER_BLOCK:
                raise ManifestError(f"{where}: a block of {math.prod(launch.block)} threads exceeds {MAX_THREADS_PER_BLOCK}")
            if launch.shared_bytes < 0 or launch.static_shared_bytes < 0:
                raise ManifestError(f"{where}: shared_bytes and static_shared_bytes must not be negative")
            for j, arg in enumerate(launch.args):
                at = f"{where}.args[{j}]"
                if isinstance(arg, TensorArg):
                    if roles.get(arg.name) != arg.role:
                        raise ManifestError(f"{at}: no {arg.role} named '{arg.name}'")
                elif isinstance(arg, ConstantArg):
                    if arg.name not in constant_names:
                        raise ManifestError(f"{at}: no constant named '{arg.name}'")
                elif isinstance(arg, SizeArg):
                    _check_dtype(arg.dtype, at)
                elif isinstance(arg, ArenaArg):
                    _check_dtype(arg.dtype, at)
                    if arg.offset < 0 or arg.offset + arg.nbytes > self.arena_bytes:
                        raise ManifestError(f"{at}: bytes [{arg.offset}, {arg.offset + arg.nbytes}) lie outside the arena of {self.arena_bytes}")
                    if arg.offset % DTYPE_BYTES[arg.dtype]:
                        raise ManifestError(f"{at}: offset {arg.offset} is not aligned for {arg.dtype}")
                else:
                    _check_dtype(arg.dtype, at)


def _check_dtype(dtype: str, where: str) -> None:
    if dtype not in DTYPE_BYTES:
        raise ManifestError(f"{where}: unknown dtype '{dtype}' (one of {', '.join(DTYPE_BYTES)})")


class _Reader:
    """JSON document -> Manifest, with the path of any bad field in the error."""

    def field(self, obj: Any, key: str, kind: type | tuple, where: str, default: Any = ...) -> Any:
        if not isinstance(obj, dict):
            raise ManifestError(f"{where}: expected an object")
        if key not in obj:
            if default is ...:
                raise ManifestError(f"{where}: missing '{key}'")
            return default
        value = obj[key]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise ManifestError(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, got {json.dumps(value)}")
        return value

    def ints(self, obj: Any, key: str, where: str) -> tuple[int | str, ...]:
        """Integers, or expressions of the dims (strings, version 3)."""
        values = self.field(obj, key, list, where)
        if not all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in values):
            raise ManifestError(f"{where}.{key}: expected a list of integers or size expressions, got {json.dumps(values)}")
        return tuple(values)

    def strings(self, obj: Any, key: str, where: str, default) -> tuple[str, ...]:
        values = self.field(obj, key, list, where, list(default))
        if not all(isinstance(v, str) for v in values):
            raise ManifestError(f"{where}.{key}: expected a list of strings, got {json.dumps(values)}")
        return tuple(values)

    def spec(self, obj: Any, where: str) -> TensorSpec:
        return TensorSpec(self.field(obj, "name", str, where), self.ints(obj, "shape", where), self.field(obj, "dtype", str, where))

    def arg(self, obj: Any, where: str) -> Arg:
        kinds = [k for k in ("input", "output", "arena", "scalar", "constant", "size") if isinstance(obj, dict) and k in obj]
        if len(kinds) != 1:
            raise ManifestError(f"{where}: an argument has exactly one of input, output, arena, scalar, constant, size")
        kind = kinds[0]
        if kind == "size":
            return SizeArg(self.field(obj, "size", (int, str), where), self.field(obj, "dtype", str, where, "i64"))
        if kind == "constant":
            return ConstantArg(self.field(obj, "constant", str, where))
        if kind in ("input", "output"):
            return TensorArg(kind, self.field(obj, kind, str, where))
        if kind == "arena":
            return ArenaArg(self.field(obj, "arena", (int, str), where), self.ints(obj, "shape", where), self.field(obj, "dtype", str, where))
        return ScalarArg(self.field(obj, "scalar", (int, float), where), self.field(obj, "dtype", str, where))

    def constant(self, obj: Any, where: str) -> ConstantSpec:
        return ConstantSpec(
            self.field(obj, "name", str, where), self.ints(obj, "shape", where), self.field(obj, "dtype", str, where),
            self.field(obj, "file", str, where), self.field(obj, "tensor", str, where),
        )

    def launch(self, obj: Any, where: str) -> Launch:
        grid, block = self.ints(obj, "grid", where), self.ints(obj, "block", where)
        if not (1 <= len(grid) <= 3 and 1 <= len(block) <= 3):
            raise ManifestError(f"{where}: grid and block have one to three sizes")
        shared_bytes = self.field(obj, "shared_bytes", int, where, 0)
        static_bytes = self.field(obj, "static_shared_bytes", int, where, 0)
        opt_in = self.field(obj, "shared_opt_in", bool, where, None)
        if opt_in is not None and opt_in != (static_bytes + shared_bytes > DEFAULT_DYNAMIC_SHARED_LIMIT):
            raise ManifestError(f"{where}.shared_opt_in: must be {json.dumps(not opt_in)} for {static_bytes} static + {shared_bytes} dynamic shared bytes (the opt-in threshold is {DEFAULT_DYNAMIC_SHARED_LIMIT})")
        return Launch(
            kernel=self.field(obj, "kernel", str, where),
            grid=grid,
            block=block,
            args=tuple(self.arg(a, f"{where}.args[{i}]") for i, a in enumerate(self.field(obj, "args", list, where))),
            shared_bytes=shared_bytes,
            static_shared_bytes=static_bytes,
        )

    def manifest(self, doc: Any) -> Manifest:
        where = "kernels.json"
        checks = [tuple(self.field(c, k, str, f"checks[{i}]") for k in ("lhs", "rhs", "where", "message")) for i, c in enumerate(self.field(doc, "checks", list, where, []))]
        manifest = self.read(doc, where, checks)
        dims = self.field(doc, "dims", list, where, None)
        if dims is not None:
            written = {self.field(d, "name", str, f"dims[{i}]"): (self.field(d, "input", str, f"dims[{i}]"), self.field(d, "axis", int, f"dims[{i}]")) for i, d in enumerate(dims)}
            if written != manifest.dims:
                raise ManifestError(f"{where}.dims: {written} disagrees with the inputs' shapes, which define {manifest.dims}")
        return manifest

    def read(self, doc: Any, where: str, checks) -> Manifest:
        return Manifest(
            checks=tuple(checks),
            version=self.field(doc, "version", int, where),
            source=self.field(doc, "source", str, where),
            entry=self.field(doc, "entry", str, where, "main"),
            arch=self.field(doc, "arch", str, where, None),
            compile_options=tuple(self.strings(doc, "compile_options", where, COMPILE_OPTIONS)),
            arena_bytes=self.field(doc, "arena_bytes", (int, str), where, 0),
            inputs=tuple(self.spec(s, f"inputs[{i}]") for i, s in enumerate(self.field(doc, "inputs", list, where))),
            outputs=tuple(self.spec(s, f"outputs[{i}]") for i, s in enumerate(self.field(doc, "outputs", list, where))),
            constants=tuple(self.constant(c, f"constants[{i}]") for i, c in enumerate(self.field(doc, "constants", list, where, []))),
            launches=tuple(self.launch(l, f"launches[{i}]") for i, l in enumerate(self.field(doc, "launches", list, where))),
        )
