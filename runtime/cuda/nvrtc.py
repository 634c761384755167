"""Compile CUDA C to PTX or a cubin with NVRTC; no GPU needed.

NVRTC is reached through `cuda.bindings.nvrtc` (NVIDIA's public Python
bindings; the library itself comes from the nvidia-cuda-nvrtc wheel). The
architecture is a parameter, never asked of a device, so the same call
works on a machine without a GPU, for `sm_80` and `sm_90` alike.

Options (`NvrtcOptions`), and why they default as they do:
- `-std=c++17`: what the emitter writes.
- `-default-device`: helper functions need no `__device__` annotation.
- `--fmad=true` (NVRTC's and nvcc's default): `a*b+c` may contract to an
  fma, which is faster and rounds once; `fmad=False` gives results that a
  CPU run without fma can match more closely.
- fast math is off; `fast_math=True` adds `--use_fast_math` (approximate
  division, sqrt and transcendentals, flush-to-zero) only on request.
- `ptxas_verbose=True` adds `-Xptxas=-v` when compiling a cubin: the ptxas
  report (registers, spills, shared memory) lands in the program log, see
  resources.py.
- `syntax_only=True` adds `-fdevice-syntax-only`: the front end's checks
  only, no code (20x faster on large files); how the driver checks the
  CUDA C it writes.
The fusecc prelude (include/fusecc_cuda.cuh) is always available to
`#include`; CUDA's own headers (cuda_fp16.h, cuda_bf16.h) are found through
cuda.pathfinder (a CUDA toolkit, or the nvidia-cuda-runtime wheel).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from functools import lru_cache

from fusecc.passes.backends.cuda.source import INCLUDE_DIR, PRELUDE_NAME, CudaCompileError, kernel_names

_ARCH = re.compile(r"sm_(\d+)[a-z]?$")


class NvrtcError(CudaCompileError):
    """NVRTC rejected a source (or could not run); the log is in the message."""


class NvrtcUnavailable(RuntimeError):
    """cuda-bindings or the NVRTC library is not installed."""


@dataclass(frozen=True)
class NvrtcOptions:
    fmad: bool = True
    fast_math: bool = False
    std: str = "c++17"
    default_device: bool = True
    line_info: bool = False
    ptxas_verbose: bool = False
    syntax_only: bool = False
    defines: tuple[str, ...] = ()  # NAME or NAME=VALUE

    def flags(self, arch: str, output: str) -> list[str]:
        match = _ARCH.match(arch)
        if match is None:
            raise ValueError(f"architecture '{arch}' is not of the form sm_NN")
        flags = [f"-arch={arch}" if output == "cubin" else f"-arch=compute_{arch[3:]}", f"-std={self.std}"]
        flags.append(f"--fmad={'true' if self.fmad else 'false'}")
        if self.fast_math:
            flags.append("--use_fast_math")
        if self.default_device:
            flags.append("-default-device")
        if self.line_info:
            flags.append("-lineinfo")
        if self.ptxas_verbose and output == "cubin":
            flags.append("-Xptxas=-v")
        if self.syntax_only:
            flags.append("-fdevice-syntax-only")
        flags += [f"-D{d}" for d in self.defines]
        flags += [f"-I{d}" for d in cuda_include_dirs()]
        return flags


@dataclass(frozen=True)
class NvrtcOutput:
    code: bytes  # PTX text or the cubin
    output: str  # "ptx" or "cubin"
    arch: str
    log: str  # warnings, and the ptxas report when asked for
    flags: tuple[str, ...]
    seconds: float = field(compare=False)

    @property
    def ptx(self) -> str:
        if self.output != "ptx":
            raise ValueError("this is a cubin, not PTX")
        return self.code.decode()


@lru_cache(maxsize=1)
def cuda_include_dirs() -> tuple[str, ...]:
    """Where cuda_fp16.h and friends are, if anywhere: CUDA_PATH/CUDA_HOME,
    a system toolkit, or NVIDIA's header wheels (via cuda.pathfinder)."""
    try:
        from cuda.pathfinder import locate_nvidia_header_directory
    except ImportError:
        return ()
    try:
        found = locate_nvidia_header_directory("cudart")
    except Exception:  # pathfinder raises several kinds when nothing is installed
        return ()
    return (found.abs_path,) if found is not None else ()


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise NvrtcUnavailable(
            f"NVRTC is not available ({exc}); install it with: pip install cuda-bindings nvidia-cuda-nvrtc"
        ) from None
    return nvrtc


@lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    nvrtc = _nvrtc()
    result, major, minor = nvrtc.nvrtcVersion()
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise NvrtcUnavailable(f"NVRTC does not load: {result.name}")
    return major, minor


@lru_cache(maxsize=1)
def _prelude_header() -> tuple[bytes, bytes]:
    return (INCLUDE_DIR / PRELUDE_NAME).read_bytes(), PRELUDE_NAME.encode()


def compile_cuda(
    source: str,
    filename: str = "kernels.cu",
    *,
    arch: str = "sm_90",
    output: str = "cubin",
    options: NvrtcOptions = NvrtcOptions(),
) -> NvrtcOutput:
    """Compile one translation unit; raises NvrtcError naming the file, its
    kernels and NVRTC's log when it does not compile."""
    if output not in ("ptx", "cubin"):
        raise ValueError(f"output must be 'ptx' or 'cubin', not '{output}'")
    nvrtc = _nvrtc()
    flags = options.flags(arch, output)
    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS

    def fail(what: str, result, log: str = "") -> NvrtcError:
        detail = log or f"{what}: {result.name}"
        return NvrtcError("NVRTC", filename, kernel_names(source, require_extern_c=False), detail)

    start = time.perf_counter()
    prelude, prelude_name = _prelude_header()
    result, program = nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 1, [prelude], [prelude_name])
    if result != ok:
        raise fail("nvrtcCreateProgram", result)
    try:
        compiled = nvrtc.nvrtcCompileProgram(program, len(flags), [f.encode() for f in flags])[0]
        result, size = nvrtc.nvrtcGetProgramLogSize(program)
        log_buffer = b" " * size
        nvrtc.nvrtcGetProgramLog(program, log_buffer)
        log = log_buffer.rstrip(b"\0").decode(errors="replace")
        if compiled != ok:
            if "could not open source file \"cuda_" in log and not cuda_include_dirs():
                log += "\nnote: CUDA's headers were not found; set CUDA_PATH or pip install nvidia-cuda-runtime"
            raise fail("nvrtcCompileProgram", compiled, log)
        if options.syntax_only:
            return NvrtcOutput(b"", output, arch, log.strip(), tuple(flags), time.perf_counter() - start)
        get_size, get_code = (
            (nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if output == "cubin" else (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)
        )
        result, size = get_size(program)
        code = b" " * size
        if result != ok or get_code(program, code)[0] != ok:
            raise fail(f"reading the {output}", result)
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    if output == "ptx":
        code = code.rstrip(b"\0")
    return NvrtcOutput(code, output, arch, log.strip(), tuple(flags), time.perf_counter() - start)
