"""The driver's levels: which pipeline produces each `--emit` level.

One table, so that `fusecc --emit=LEVEL`, the tests and the docs agree on
what each level is. Later levels extend earlier ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Level:
    pipeline: str  # with {target} and {arch} placeholders
    emitter: Callable | None = None  # text for the level; None prints the IR
    summary: str = ""


EMIT_LEVELS: dict[str, Level] = {
    "tensor": Level("", summary="the verified input program"),
    "fused": Level("canonicalize,cse,fuse{{target={target}}}", summary="fusion groups"),
    "tiled": Level("canonicalize,cse,fuse{{target={target}}},tile{{target={target}}}", summary="tiled fusion groups"),
    "loop": Level(
        "canonicalize,cse,fuse{{target={target}}},tile{{target={target}}},lower-to-loops{{target={target}}},plan-memory",
        summary="the loop dialect: kernels and a host schedule over one planned arena",
    ),
    "llvm": Level("canonicalize,cse,fuse{{target=cpu}},tile{{target=cpu}},lower-to-loops{{target=cpu}},plan-memory", summary="LLVM IR for the CPU"),
    "cuda": Level(
        "canonicalize,cse,fuse{{target={target}}},tile{{target={target}}},lower-to-loops{{target={target}}},plan-memory",
        summary="CUDA C",
    ),
}


def pipeline_for_level(level: str, target: str = "h200", arch: str = "sm_90") -> str:
    return EMIT_LEVELS[level].pipeline.format(target=target, arch=arch)
