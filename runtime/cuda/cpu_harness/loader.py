"""Compile a .cu file with the host C++ compiler and run its kernels on the CPU.

    module = CpuModule.compile(source, "softmax_rows.cu")
    module.launch("softmax_rows", grid=(rows,), block=(128,), args=[x, y, np.int32(cols)],
                  shared_bytes=4 * 4)

The source is compiled unchanged, with cuda_cpu.h force-included and the
fusecc prelude on the include path, into a shared library cached by a
digest of everything that goes into it. Each kernel gets two exported entry
points: one that runs blocks of a launch, one that describes its parameter
types, so arguments are checked and converted to the kernel's exact C types
(numpy arrays become pointers to their data, in place). A launch hands the
grid's blocks to worker threads through a shared counter; ctypes releases
the GIL during each call, so the workers run in parallel.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from fusecc.runtime import cache

from fusecc.passes.backends.cuda.source import INCLUDE_DIR, PRELUDE_NAME, CudaCompileError, kernel_names

HEADER = Path(__file__).with_name("cuda_cpu.h")
SANITIZER_HEADER = Path(__file__).with_name("cuda_cpu_sanitizer.h")
MMA_HEADER = Path(__file__).with_name("cuda_cpu_mma.h")  # included by cuda_cpu.h
VECTOR_HEADER = Path(__file__).with_name("cuda_cpu_vector.h")  # included by cuda_cpu.h
# A sanitized build: GCC's -fsanitize=thread instrumentation calls the hooks of
# cuda_cpu_sanitizer.h (libtsan is not linked); -g lets findings name source lines.
SANITIZE_FLAGS = ("-DFUSECC_CPU_SANITIZE", "-fsanitize=thread", "-g", "-fno-omit-frame-pointer")
CXX_FLAGS = ("-std=c++20", "-fPIC", "-fvisibility=hidden", "-fno-strict-aliasing")
# -O2 by default. ISO C++ mode contracts no a*b+c into an fma at any level, so
# every level computes the same bits; -O0 compiles in half the time (0.37 vs
# 0.78 s of g++ for a fuzz program, sanitized), which pays where programs are
# small and each is built once (the fuzzer).
OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3")
MAX_THREADS_PER_BLOCK = 1024


class CpuCompileError(CudaCompileError):
    """The host compiler rejected a .cu file; its log is in the message."""


class HostCompilerMissing(RuntimeError):
    """No C++ compiler to build the harness with."""


class CpuLaunchError(RuntimeError):
    """A kernel failed while running (deadlock, __trap())."""


# --------------------------------------------------------------------------- the C side, mirrored


class _ParamInfo(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("size", ctypes.c_int32), ("pointee_kind", ctypes.c_int32), ("pointee_size", ctypes.c_int32)]


class _LaunchParams(ctypes.Structure):
    _fields_ = [
        ("grid", ctypes.c_uint32 * 3),
        ("block", ctypes.c_uint32 * 3),
        ("shared_bytes", ctypes.c_uint64),
        ("args", ctypes.POINTER(ctypes.c_void_p)),
        ("next_block", ctypes.POINTER(ctypes.c_int64)),
        ("failed", ctypes.POINTER(ctypes.c_int32)),
        ("error", ctypes.c_void_p),
        ("error_capacity", ctypes.c_uint64),
        ("reverse", ctypes.c_int32),
        ("region_count", ctypes.c_int32),
        ("regions", ctypes.c_void_p),
        ("report", ctypes.c_void_p),
        ("counters", ctypes.c_void_p),
        ("block_limit", ctypes.c_int64),
    ]


# ParamKind in cuda_cpu.h
OTHER, POINTER, SIGNED, UNSIGNED, FLOAT, F16, BF16, BOOL = range(8)
_SCALAR_CTYPES = {
    (SIGNED, 1): ctypes.c_int8,
    (SIGNED, 2): ctypes.c_int16,
    (SIGNED, 4): ctypes.c_int32,
    (SIGNED, 8): ctypes.c_int64,
    (UNSIGNED, 1): ctypes.c_uint8,
    (UNSIGNED, 2): ctypes.c_uint16,
    (UNSIGNED, 4): ctypes.c_uint32,
    (UNSIGNED, 8): ctypes.c_uint64,
    (FLOAT, 4): ctypes.c_float,
    (FLOAT, 8): ctypes.c_double,
    (BOOL, 1): ctypes.c_bool,
}
# The numpy dtypes a pointer's element type accepts; bf16 is carried as its uint16 bits.
_POINTEE_DTYPES = {
    (FLOAT, 4): ("float32",),
    (FLOAT, 8): ("float64",),
    (F16, 2): ("float16",),
    (BF16, 2): ("uint16",),
    (BOOL, 1): ("bool", "uint8"),
    (SIGNED, 1): ("int8",),
    (SIGNED, 2): ("int16",),
    (SIGNED, 4): ("int32",),
    (SIGNED, 8): ("int64",),
    (UNSIGNED, 1): ("uint8", "bool"),
    (UNSIGNED, 2): ("uint16",),
    (UNSIGNED, 4): ("uint32",),
    (UNSIGNED, 8): ("uint64",),
}
_KIND_NAMES = {OTHER: "struct", POINTER: "pointer", SIGNED: "int", UNSIGNED: "uint", FLOAT: "float", F16: "__half", BF16: "__nv_bfloat16", BOOL: "bool"}


@dataclass(frozen=True)
class Param:
    """One kernel parameter's C type, as the compiled library reports it."""

    kind: int
    size: int
    pointee_kind: int = OTHER
    pointee_size: int = 0

    def __str__(self) -> str:
        if self.kind == POINTER:
            return f"pointer to {_KIND_NAMES[self.pointee_kind]}{self.pointee_size * 8 if self.pointee_kind in (SIGNED, UNSIGNED, FLOAT) else ''}"
        return f"{_KIND_NAMES[self.kind]}{self.size * 8 if self.kind in (SIGNED, UNSIGNED, FLOAT) else ''}"

    def convert(self, value: Any) -> ctypes._SimpleCData:
        """The argument as a C value of this parameter's type; TypeError if it does not fit."""
        if self.kind == POINTER:
            if value is None:
                return ctypes.c_void_p(None)
            if not isinstance(value, np.ndarray):
                raise TypeError(f"expects a numpy array ({self}), got {type(value).__name__}")
            if not value.flags.c_contiguous:
                raise TypeError("expects a C-contiguous array")
            accepted = _POINTEE_DTYPES.get((self.pointee_kind, self.pointee_size))
            if accepted is not None and value.dtype.name not in accepted:
                raise TypeError(f"expects a {' or '.join(accepted)} array ({self}), got {value.dtype}")
            return ctypes.c_void_p(value.ctypes.data)
        if isinstance(value, np.ndarray) and value.ndim > 0:
            raise TypeError(f"expects a scalar ({self}), got an array")
        if self.kind in (F16, BF16) and isinstance(value, np.uint16):  # already the bit pattern
            return ctypes.c_uint16(int(value))
        if self.kind == F16:
            return ctypes.c_uint16(int(np.float16(value).view(np.uint16)))
        if self.kind == BF16:
            return ctypes.c_uint16(int(bf16_bits(np.float32(value))))
        ctype = _SCALAR_CTYPES.get((self.kind, self.size))
        if ctype is None:
            raise TypeError(f"parameters of type {self} cannot be passed from Python")
        if self.kind in (SIGNED, UNSIGNED) and not isinstance(value, (int, np.integer)):
            raise TypeError(f"expects an integer ({self}), got {type(value).__name__}")
        return ctype(value.item() if isinstance(value, np.generic) else value)


def bf16_bits(values) -> np.ndarray:
    """float32 values as bf16 bit patterns (uint16), rounded to nearest even."""
    from fusecc.runtime.reference import round_bf16

    return (round_bf16(np.asarray(values, dtype=np.float32)).view(np.uint32) >> 16).astype(np.uint16)


# --------------------------------------------------------------------------- compiling

REDZONE_BYTES = 64  # after each static __shared__ array of a sanitized build
_STATIC_SHARED = re.compile(r"^(\s+__shared__\s+(?:__align__\(\d+\)\s+)?[\w:<>, ]+?\s+(\w+)\s*(?:\[[^\]]+\])+\s*;)", re.M)


def register_static_shared(source: str) -> str:
    """Each static `__shared__` array inside a kernel gets a red zone after it
    and a call registering both with the sanitizer, on its own line (so the
    line numbers of kernels.cu stay those of the file the user has)."""

    def add(match: re.Match) -> str:
        name = match.group(2)
        zone = f"{name}__fusecc_redzone"
        return f'{match.group(1)} __shared__ unsigned char {zone}[{REDZONE_BYTES}]; fusecc_cpu::san::shared_array({name}, sizeof({name}), {zone}, {REDZONE_BYTES}, "{name}");'

    return _STATIC_SHARED.sub(add, source)




@lru_cache(maxsize=1)
def host_compiler() -> tuple[str, str]:
    """(path, version) of the C++ compiler: $FUSECC_CXX, else g++."""
    name = os.environ.get("FUSECC_CXX", "g++")
    path = shutil.which(name)
    if path is None:
        raise HostCompilerMissing(f"the host C++ compiler '{name}' was not found; install g++ or set FUSECC_CXX")
    version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    return path, version[0] if version else "?"


def _precompiled_header(root: str | os.PathLike | None, flags: list[str]) -> Path:
    """cuda_cpu.h with a precompiled .gch beside it, built once per header,
    compiler and flags: it halves the time of each later compile (the C++
    standard headers dominate). A cache entry of its own (the .gch is code
    that goes into every library, so its digest is checked like theirs); if
    the .gch could not be built the entry holds none and the text header is used."""
    cxx, version = host_compiler()

    def build(folder: Path) -> None:
        shutil.copy(HEADER, folder / "cuda_cpu.h")
        shutil.copy(MMA_HEADER, folder / MMA_HEADER.name)
        shutil.copy(VECTOR_HEADER, folder / VECTOR_HEADER.name)
        shutil.copy(SANITIZER_HEADER, folder / SANITIZER_HEADER.name)
        command = [cxx, *flags, "-x", "c++-header", "cuda_cpu.h", "-o", "cuda_cpu.h.gch"]
        subprocess.run(command, cwd=folder, capture_output=True, timeout=300)

    entry, _ = cache.fetch("cpu-harness", "pch-" + cache.digest(HEADER.read_bytes() + MMA_HEADER.read_bytes() + VECTOR_HEADER.read_bytes() + SANITIZER_HEADER.read_bytes(), version, " ".join(flags)), build, root)
    return entry / "cuda_cpu.h" if (entry / "cuda_cpu.h.gch").exists() else HEADER


def _build(source: str, filename: str, kernels: list[str], flags: list[str], header: Path, library: Path) -> None:
    """Compile into `library`. The sources go into a private folder (mode
    0700, tempfile.mkdtemp) and the compiler gets its arguments as a list:
    no shell, no file another user can swap."""
    cxx, _ = host_compiler()
    with tempfile.TemporaryDirectory(prefix="fusecc-build-") as build:
        base = os.path.basename(filename) or "kernels.cu"
        Path(build, base).write_text(source)
        exports = "".join(f"FUSECC_CPU_EXPORT({name})\n" for name in kernels)
        Path(build, "fusecc_cpu_exports.cpp").write_text(f'#include "{base}"\n{exports}')
        command = [cxx, *flags, "-shared", "-I", str(INCLUDE_DIR), "-include", str(header), "fusecc_cpu_exports.cpp", "-o", "library.so"]
        if "-fsanitize=thread" in flags:  # compile instrumented, link without libtsan (the hooks are ours)
            command[command.index("-shared")] = "-c"
            command[-1] = "library.o"
        proc = subprocess.run(command, cwd=build, capture_output=True, text=True, timeout=300, env={**os.environ, "LC_ALL": "C"})
        if proc.returncode == 0 and "-fsanitize=thread" in flags:
            link = [cxx, "-shared", "library.o", "-o", "library.so"]
            proc = subprocess.run(link, cwd=build, capture_output=True, text=True, timeout=300, env={**os.environ, "LC_ALL": "C"})
        if proc.returncode != 0:
            log = "\n".join(line for line in (proc.stderr or proc.stdout).splitlines() if "fusecc_cpu_exports.cpp:1:" not in line)
            raise CpuCompileError(os.path.basename(cxx), filename, kernels, log)
        shutil.move(Path(build, "library.so"), library)


# --------------------------------------------------------------------------- running


@lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=max(1, default_workers() - 1), thread_name_prefix="fusecc-cpu")


def default_workers() -> int:
    """Worker threads per launch: $FUSECC_CPU_WORKERS, else one per core."""
    return int(os.environ.get("FUSECC_CPU_WORKERS", 0)) or os.cpu_count() or 1


def _dim3(value: int | Sequence[int], what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(int(d) < 1 for d in dims):
        raise ValueError(f"{what} must be 1 to 3 positive sizes, got {value!r}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


@dataclass(frozen=True)
class CpuKernel:
    name: str
    params: tuple[Param, ...]
    entry: Any  # the ctypes function


class CpuModule:
    """A .cu file compiled for the CPU: its kernels by name, ready to launch."""

    def __init__(self, library: Path, filename: str, kernels: list[str], compiled: bool):
        self.library = library
        self.filename = filename
        self.compiled = compiled  # False when it came from the cache
        self._dll = ctypes.CDLL(str(library))
        self.kernels = {name: self._kernel(name) for name in kernels}

    @classmethod
    def compile(
        cls,
        source: str,
        filename: str = "kernels.cu",
        *,
        cache_dir: str | os.PathLike | None = None,
        defines: Sequence[str] = (),
        sanitize: bool = False,
        opt_level: str = "-O2",
    ) -> "CpuModule":
        """Compile (or find in the cache) and load. `defines` are extra
        -D macros, e.g. FUSECC_CPU_UCONTEXT to use the portable fiber switch.
        `sanitize` builds the offline sanitizer in (sanitizer.py runs it);
        `opt_level` is one of OPT_LEVELS."""
        if opt_level not in OPT_LEVELS:
            raise ValueError(f"opt_level must be one of {', '.join(OPT_LEVELS)}, got {opt_level!r}")
        kernels = kernel_names(source)
        flags = [opt_level, *CXX_FLAGS, *(f"-D{d}" for d in defines), *(SANITIZE_FLAGS if sanitize else ())]
        if sanitize:
            source = register_static_shared(source)
        _, version = host_compiler()
        headers = HEADER.read_bytes() + MMA_HEADER.read_bytes() + VECTOR_HEADER.read_bytes() + (SANITIZER_HEADER.read_bytes() if sanitize else b"")
        key = cache.digest(source, filename, headers, (INCLUDE_DIR / PRELUDE_NAME).read_bytes(), version, " ".join(flags))

        def build(folder: Path) -> None:
            header = HEADER if defines else _precompiled_header(cache_dir, flags)
            _build(source, filename, kernels, flags, header, folder / "library.so")

        entry, found = cache.fetch("cpu-harness", key, build, cache_dir)
        library, compiled = entry / "library.so", not found
        return cls(library, filename, kernels, compiled)

    def _kernel(self, name: str) -> CpuKernel:
        entry = getattr(self._dll, f"fusecc_launch_{name}")
        entry.argtypes = [ctypes.POINTER(_LaunchParams)]
        entry.restype = ctypes.c_int
        describe = getattr(self._dll, f"fusecc_signature_{name}")
        describe.argtypes = [ctypes.POINTER(_ParamInfo), ctypes.c_int]
        describe.restype = ctypes.c_int
        infos = (_ParamInfo * 64)()
        count = describe(infos, 64)
        if count > 64:
            infos = (_ParamInfo * count)()
            describe(infos, count)
        params = tuple(Param(i.kind, i.size, i.pointee_kind, i.pointee_size) for i in infos[:count])
        return CpuKernel(name, params, entry)

    def launch(
        self,
        kernel: str,
        grid: int | Sequence[int],
        block: int | Sequence[int],
        args: Sequence[Any],
        shared_bytes: int = 0,
        workers: int | None = None,
        *,
        reverse: bool = False,
        regions: Any = None,
        report: Any = None,
        counters: Any = None,
        block_limit: int = 0,
    ) -> None:
        """Run one kernel launch to completion (launches run in call order).
        `reverse` runs each block's threads in descending order; `regions`,
        `report` and `counters` are the sanitizer's (sanitizer.py, counters.py),
        for a sanitized build; `block_limit` runs only the first blocks."""
        found = self.kernels.get(kernel)
        if found is None:
            raise KeyError(f"no kernel '{kernel}' in {self.filename} (kernels: {', '.join(self.kernels)})")
        grid3, block3 = _dim3(grid, "grid"), _dim3(block, "block")
        if math.prod(block3) > MAX_THREADS_PER_BLOCK:
            raise ValueError(f"block {block3} has more than {MAX_THREADS_PER_BLOCK} threads")
        if len(args) != len(found.params):
            raise TypeError(f"kernel {kernel} takes {len(found.params)} arguments, got {len(args)}")
        values = []
        for index, (param, arg) in enumerate(zip(found.params, args)):
            try:
                values.append(param.convert(arg))
            except TypeError as exc:
                raise TypeError(f"argument {index} of kernel {kernel}: {exc}") from None
        pointers = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
        next_block, failed = ctypes.c_int64(0), ctypes.c_int32(0)
        error = ctypes.create_string_buffer(1024)
        params = _LaunchParams(
            (ctypes.c_uint32 * 3)(*grid3),
            (ctypes.c_uint32 * 3)(*block3),
            shared_bytes,
            pointers,
            ctypes.pointer(next_block),
            ctypes.pointer(failed),
            ctypes.addressof(error),
            len(error),
            int(reverse),
            len(regions) if regions is not None else 0,
            ctypes.addressof(regions) if regions is not None else None,
            ctypes.addressof(report) if report is not None else None,
            ctypes.addressof(counters) if counters is not None else None,
            block_limit,
        )
        helpers = min(workers or default_workers(), math.prod(grid3)) - 1
        futures = [_pool().submit(found.entry, ctypes.byref(params)) for _ in range(max(0, helpers))]
        found.entry(ctypes.byref(params))
        for future in futures:
            future.result()
        if failed.value:
            raise CpuLaunchError(f"kernel {kernel} failed on the CPU: {error.value.decode(errors='replace')}")
