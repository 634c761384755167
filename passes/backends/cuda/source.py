"""What the CUDA tools share about a CUDA C source: its kernels, the
prelude it may include, and how a failed compilation is reported."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

INCLUDE_DIR = Path(__file__).parent  # the prelude sits beside the emitter that includes it
PRELUDE_NAME = "fusecc_cuda.cuh"

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_LAUNCH_BOUNDS = r"(?:__launch_bounds__\s*\([^)]*\)\s*)?"
_KERNEL = re.compile(rf'(extern\s+"C"\s+)?__global__\s+{_LAUNCH_BOUNDS}void\s+{_LAUNCH_BOUNDS}([A-Za-z_]\w*)\s*\(')


@lru_cache(maxsize=1)
def prelude_text() -> str:
    """The prelude, for an emitter that pastes it into a stand-alone .cu file."""
    return (INCLUDE_DIR / PRELUDE_NAME).read_text()


def kernel_names(source: str, require_extern_c: bool = True) -> list[str]:
    """The `__global__` functions of a source, in order of definition.

    Kernels must be `extern "C"` so that every runtime finds them by their
    plain name; unless told otherwise, a kernel without it is an error.
    """
    found = _KERNEL.findall(_COMMENT.sub(" ", source))
    mangled = [name for extern_c, name in found if not extern_c]
    if mangled and require_extern_c:
        raise CudaSourceError(f"kernels must be declared extern \"C\" __global__: {', '.join(mangled)}")
    return [name for _, name in found]


class CudaSourceError(ValueError):
    """The CUDA C source breaks a convention of docs/cuda-c-conventions.md."""


class CudaCompileError(Exception):
    """A CUDA C file did not compile. The message names the file, its
    kernels and the compiler, and includes the compiler's log; callers that
    generated the source turn it into an internal compiler error."""

    def __init__(self, compiler: str, filename: str, kernels: list[str], log: str):
        self.compiler = compiler
        self.filename = filename
        self.kernels = kernels
        self.log = log.rstrip()
        names = ", ".join(kernels) if kernels else "none found"
        super().__init__(f"{compiler} failed to compile {filename} (kernels: {names}):\n{self.log}")
