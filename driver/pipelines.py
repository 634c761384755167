"""The driver's levels: which pipeline produces each `--emit` level.

One table, so that `fusecc --emit=LEVEL`, the tests and the docs agree on
what each level is. Later levels extend earlier ones. Every level past the
input inlines calls first: fusion and the lowering work on one function
body at a time (`fusecc run` of a program with calls needs that too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class EmitOptions:
    """What a level's emitter may be told; the tools build it from their flags."""

    arch: str = "sm_90"  # the CUDA architecture NVRTC checks for
    output: str | None = None  # the -o path (names kernels.cu and places its manifest); None: stdout
    source_name: str | None = None  # the input file's name, for the source's comments
    resource_usage: bool = False  # also report registers and spills per CUDA kernel
    isa: frozenset[str] | None = None  # LLVM: the CPU extensions to specialise for (None: this host's)


@dataclass
class Emitted:
    """A level's output. The driver writes `text` (to -o or stdout), then the
    files in `beside`, and `notes` to stderr: emitters write nothing."""

    text: str
    beside: dict[str, str | bytes] = field(default_factory=dict)  # path -> text (or bytes: the CUDA constants file)
    notes: str = ""


@dataclass(frozen=True)
class Level:
    pipeline: str  # with {target} and {arch} placeholders
    # (module, EmitOptions) -> Emitted; None prints the IR
    emitter: Callable[..., Emitted] | None = None
    summary: str = ""
    from_loops: bool = False  # the level starts from loop IR: a module already there skips the pipeline


def _cuda_level(module, options: EmitOptions) -> Emitted:
    from fusecc.driver.cuda_level import cuda_level_outputs

    text, beside, notes = cuda_level_outputs(module, arch=options.arch, output=options.output, source_name=options.source_name, resource_usage=options.resource_usage)
    return Emitted(text, beside, notes)


def is_loop_level(module) -> bool:
    """A module of `loop.kernel`s and `loop.schedule`s, with no tensor functions left."""
    ops = {op.name for op in module.body} if module.regions else set()
    return bool(ops & {"loop.kernel", "loop.schedule"}) and "func.func" not in ops


def _emit_llvm(module, options: EmitOptions) -> Emitted:
    from fusecc.passes.backends.llvm.emit import emit_llvm_text

    return Emitted(emit_llvm_text(module, isa=options.isa))


EMIT_LEVELS: dict[str, Level] = {
    "tensor": Level("", summary="the verified input program"),
    "fused": Level("inline,canonicalize,cse,fuse{{target={target}}}", summary="fusion groups"),
    "tiled": Level("inline,canonicalize,cse,fuse{{target={target}}},tile{{target={target}}}", summary="tiled fusion groups"),
    "loop": Level(
        "inline,canonicalize,cse,fuse{{target={target}}},tile{{target={target}}},lower-to-loops{{target={target}}},plan-memory,legalize{{target={target}}},share-kernels",
        summary="the loop dialect: kernels and a host schedule over one planned arena",
        from_loops=True,
    ),
    "llvm": Level(
        "inline,canonicalize,cse,fuse{{target=cpu}},tile{{target=cpu}},lower-to-loops{{target=cpu}},plan-memory,legalize{{target=cpu}},share-kernels",
        emitter=_emit_llvm,
        summary="LLVM IR for the CPU",
        from_loops=True,
    ),
    "cuda": Level(
        "inline,canonicalize,cse,fuse{{target={target}}},tile{{target={target}}},lower-to-loops{{target={target}}},plan-memory,legalize{{target={target}}},share-kernels",
        emitter=_cuda_level,
        summary="CUDA C (and, with -o, its launch manifest)",
        from_loops=True,
    ),
}


def pipeline_for_level(level: str, target: str = "h200", arch: str = "sm_90") -> str:
    return EMIT_LEVELS[level].pipeline.format(target=target, arch=arch)
