"""--target, --gpu and --arch: one meaning each, the same in every tool.

    --target {reference,cpu,cuda,cuda-sim}   where the program runs (`fusecc run`),
                                             or which code generator it is compiled for
    --gpu {h200,a100}                        the GPU that fusion and tiling are tuned for
    --arch {sm_90,sm_80}                     the same GPU, named by its CUDA architecture
    --allow-tf32                             f32 matmuls may run on TF32 tensor cores (inputs
                                             rounded to a 10-bit mantissa; docs/cuda-tensor-cores.md)

`cuda-sim` is the CUDA C of `cuda`, run on this CPU by the harness in
runtime/cuda/cpu_harness, so its code is the GPU's (tuned for --gpu).
A flag that would change nothing (--gpu with --target cpu) is refused rather
than ignored. The old spelling `--target h200` (hardware, before --gpu
existed) still works and means `--target cuda --gpu h200`, with a warning.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from dataclasses import dataclass

from fusecc.compiler.diagnostics import UsageError

EXECUTION_TARGETS = ("reference", "cpu", "cuda", "cuda-sim")
GPU_ARCH = {"h200": "sm_90", "a100": "sm_80"}
ARCH_GPU = {arch: gpu for gpu, arch in GPU_ARCH.items()}
DEFAULT_GPU = "h200"
GPU_TARGETS = ("cuda", "cuda-sim")
COMPILE_TARGETS = ("cpu", "cuda", "cuda-sim")  # what compiles (the reference interpreter compiles nothing)


@dataclass(frozen=True)
class TargetChoice:
    """What the flags asked for: where code runs and what it is tuned for."""

    name: str  # one of EXECUTION_TARGETS (or a registered run target)
    gpu: str | None  # h200 or a100 for the GPU targets; None for cpu and reference
    allow_tf32: bool = False  # f32 matmuls may use TF32 tensor cores (GPU targets only)

    @property
    def hardware(self) -> str:
        """The hardware model of fusion and tiling (passes/backends/hardware.py)."""
        return self.gpu if self.gpu is not None else "cpu"

    @property
    def arch(self) -> str:
        return GPU_ARCH[self.gpu or DEFAULT_GPU]

    @property
    def is_gpu(self) -> bool:
        return self.gpu is not None


def add_target_options(parser: argparse.ArgumentParser, where: str, targets: tuple[str, ...] = EXECUTION_TARGETS, tf32: bool = False) -> None:
    """--target (validated later, so that a run target registered by a plugin
    is accepted), --gpu and --arch; --allow-tf32 for the commands that
    generate CUDA C (`tf32`). `where` completes --target's help."""
    group = parser.add_argument_group("target")
    group.add_argument("--target", default=None, metavar="{" + ",".join(targets) + "}", help=where)
    group.add_argument("--gpu", choices=tuple(GPU_ARCH), default=None, help=f"the GPU to tune for (default {DEFAULT_GPU}); GPU targets only")
    group.add_argument("--arch", choices=tuple(ARCH_GPU), default=None, help="the same, by CUDA architecture (sm_90: h200, sm_80: a100)")
    if tf32:
        group.add_argument("--allow-tf32", action="store_true", help="f32 matmuls may run on TF32 tensor cores: inputs rounded to a 10-bit mantissa "
                           "(relative error ~1e-3; docs/cuda-tensor-cores.md); GPU targets only")
    group.add_argument("--shape-hint", default=None, metavar="B=8,S=128",
                       help="sizes the cost models assume for dynamic ('?') dims; never changes results (docs/dynamic-shapes.md)")


def _apply_shape_hints(text: str | None) -> None:
    """--shape-hint holds for the whole command (compiler/dims.py); a command
    without it sets none, so in-process callers start clean."""
    from fusecc.compiler.dims import parse_hints, set_shape_hints

    try:
        set_shape_hints(parse_hints(text or ""))
    except ValueError as exc:
        raise UsageError(f"--shape-hint: {exc}") from None


def suggest(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def resolve_target(args, tool: str, allowed: tuple[str, ...] | None, default: str | None) -> TargetChoice:
    """The TargetChoice of parsed `args`; a usage error for an unknown target,
    a --gpu that contradicts --arch, or a GPU flag on a target that has no GPU.
    `default` is used when --target is absent (None: the caller decides later,
    and the GPU flags must then be absent too); `allowed` None leaves the name
    to the caller's registry (`fusecc run`'s targets)."""
    name, gpu = args.target, args.gpu
    allow_tf32 = getattr(args, "allow_tf32", False)
    _apply_shape_hints(getattr(args, "shape_hint", None))
    if name in GPU_ARCH:  # the old meaning of --target: hardware
        if gpu not in (None, name):
            raise UsageError(f"--target {name} (the old spelling of --target cuda --gpu {name}) contradicts --gpu {gpu}")
        print(f"{tool}: warning: '--target {name}' is deprecated: it means '--target cuda --gpu {name}'", file=sys.stderr)
        name, gpu = "cuda", name
    if args.arch is not None:
        if gpu is not None and GPU_ARCH[gpu] != args.arch:
            raise UsageError(f"--gpu {gpu} is {GPU_ARCH[gpu]}, not --arch {args.arch}; give one of the two")
        gpu = ARCH_GPU[args.arch]
    name = name or default
    if name is None:
        if gpu is not None:
            raise UsageError("--gpu and --arch tune GPU code; give --target cuda or cuda-sim with them")
        if allow_tf32:
            raise UsageError("--allow-tf32 changes GPU code; give --target cuda or cuda-sim with it")
        return TargetChoice("", None)
    if allowed is not None and name not in allowed:
        raise UsageError(f"unknown target '{name}' for {tool}; choose one of {', '.join(allowed)}{suggest(name, allowed)}")
    if name in GPU_TARGETS:
        return TargetChoice(name, gpu or DEFAULT_GPU, allow_tf32)
    if gpu is not None or allow_tf32:
        flag = "--allow-tf32" if gpu is None else "--arch" if args.arch is not None else "--gpu"
        raise UsageError(f"{flag} {'changes' if gpu is None else 'tunes'} GPU code; it has no effect with --target {name}")
    return TargetChoice(name, None)
