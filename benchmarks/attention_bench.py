"""The CPU attention kernel alone, as BERT and MiniLM run it, old and new side by side.

    python benchmarks/attention_bench.py [--shapes 1x12x128x64,...] [--calls 15] [--rounds 9]
                                         [--variants old=DIR,new=DIR] [--flush]

Each shape BxHxSxD is one `tensor.attention` with its heads split from
[B, S, H·D] inputs by reshape + transpose (index maps in the kernel, as in
the models) and an additive padding mask [B, 1, 1, S] (-10000 on the last
quarter of the keys of the second half of the batch). One thread; the
figure is the calling thread's CPU time per call (`time.thread_time`),
the median of `--calls` calls per round, rounds rotating the variants.
GFLOP/s counts 4·B·H·S²·D (q·kᵀ and p·V).

`--variants LABEL=DIR,...`: fusecc source trees (`git archive REV | tar -x
-C DIR`); each variant's kernel is lowered by DIR's
passes/lowering/attention.py and DIR/passes/tiling/attention_tiles.py's CPU
chooser, everything else by the installed fusecc, all in this one process,
so the variants' calls alternate under the same load (a shared machine's
load moves between processes more than between calls). Ratios are the
median (and range) of per-round time ratios against the first variant;
"same" says a variant's output is bit-identical to the first's.
`--flush` writes 16 MB before each call, so the inputs come from memory
as in a model, where the weights streamed by the preceding matmuls evict
them. Nothing here is asserted by a test.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

from fusecc.compiler.parser import parse_module
from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
from fusecc.dialects import load_all
from fusecc.driver.pipelines import pipeline_for_level
from fusecc.runtime.cpu.executor import CompiledProgram, WorkerPool

SHAPES = ["1x12x128x64", "1x12x384x64", "1x12x128x32", "1x12x384x32", "8x12x128x32"]  # BERT-base and MiniLM heads


def program_text(b: int, h: int, s: int, d: int) -> str:
    x, x4, heads, mask = f"tensor<{b}x{s}x{h * d}xf32>", f"tensor<{b}x{s}x{h}x{d}xf32>", f"tensor<{b}x{h}x{s}x{d}xf32>", f"tensor<{b}x1x1x{s}xf32>"
    lines = [f"func.func @main(%q0: {x}, %k0: {x}, %v0: {x}, %m: {mask}) -> {x} {{"]
    for n in "qkv":
        lines.append(f"  %{n}1 = tensor.reshape %{n}0 : ({x}) -> {x4}")
        lines.append(f"  %{n} = tensor.transpose %{n}1 {{perm = [0, 2, 1, 3]}} : ({x4}) -> {heads}")
    lines.append(f"  %o = tensor.attention %q, %k, %v, %m : ({heads}, {heads}, {heads}, {mask}) -> {heads}")
    lines.append(f"  %o1 = tensor.transpose %o {{perm = [0, 2, 1, 3]}} : ({heads}) -> {x4}")
    lines.append(f"  %o2 = tensor.reshape %o1 : ({x4}) -> {x}")
    lines.append(f"  func.return %o2 : {x}\n}}\n")
    return "\n".join(lines)


def inputs(b: int, h: int, s: int, d: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    mask = np.zeros((b, 1, 1, s), np.float32)
    mask[b // 2:, ..., s * 3 // 4:] = -10000.0
    return [rng.standard_normal((b, s, h * d)).astype(np.float32) for _ in range(3)] + [mask]


def load_variant(label: str, tree: Path):
    """(attention template, CPU tile chooser) of a source tree, as modules of their own."""
    modules = []
    for relative in ("passes/lowering/attention.py", "passes/tiling/attention_tiles.py"):
        spec = importlib.util.spec_from_file_location(f"attention_bench_{label}_{Path(relative).stem}", tree / relative)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        modules.append(module)
    return modules[0].lower_attention, modules[1].choose_cpu_attention_tiles


def compile_with(variant, text: str) -> CompiledProgram:
    from fusecc.passes.lowering import attention as installed  # noqa: F401 (registered first, so the swap below sticks)
    from fusecc.passes.lowering.interface import TEMPLATES
    from fusecc.passes.tiling import attention_tiles

    saved = TEMPLATES["attention"], attention_tiles.choose_cpu_attention_tiles
    if variant is not None:
        TEMPLATES["attention"], attention_tiles.choose_cpu_attention_tiles = variant
    try:
        module = parse_module(text)
        run_pipeline(parse_pipeline(pipeline_for_level("loop", target="cpu")), module, PassContext(target="cpu"))
    finally:
        TEMPLATES["attention"], attention_tiles.choose_cpu_attention_tiles = saved
    return CompiledProgram(module, pool=WorkerPool(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help="BxHxSxD,...")
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--variants", default="", help="LABEL=DIR,...: fusecc source trees whose attention lowering and CPU tiles to compare")
    parser.add_argument("--flush", action="store_true", help="evict the caches before each call")
    args = parser.parse_args(argv)
    load_all()
    variants = [(label, load_variant(label, Path(tree))) for label, tree in (v.split("=", 1) for v in args.variants.split(",") if v)] or [("installed", None)]
    flush = np.zeros(4 << 20, np.float32) if args.flush else None
    print("| shape BxHxSxD | " + " | ".join(f"{label}: ms (range), GFLOP/s" for label, _ in variants) + "".join(f" | {label} ÷ {variants[0][0]}" for label, _ in variants[1:]) + " |")
    print("|---" * (1 + 2 * len(variants) - 1) + "|")
    for shape in args.shapes.split(","):
        b, h, s, d = map(int, shape.split("x"))
        feeds = inputs(b, h, s, d)
        programs = [(label, compile_with(variant, program_text(b, h, s, d))) for label, variant in variants]
        outputs = [program.run(feeds, "main")[0] for _, program in programs]
        times: dict[str, list[float]] = {label: [] for label, _ in programs}
        for r in range(args.rounds):
            for label, program in programs[r % len(programs):] + programs[: r % len(programs)]:
                calls = []
                for _ in range(args.calls):
                    if flush is not None:
                        flush += 1.0
                    start = time.thread_time()
                    program.run(feeds, "main")
                    calls.append(time.thread_time() - start)
                times[label].append(float(np.median(calls)))
        flops = 4 * b * h * s * s * d
        cells = []
        for label, _ in programs:
            t = sorted(times[label])
            cells.append(f"{np.median(t) * 1e3:.3f} ({t[0] * 1e3:.3f}–{t[-1] * 1e3:.3f}), {flops / np.median(t) / 1e9:.0f}")
        base = times[programs[0][0]]
        for (label, _), out in zip(programs[1:], outputs[1:]):
            ratios = sorted(a / b for a, b in zip(times[label], base))
            same = "same" if np.array_equal(out, outputs[0]) else f"max |diff| {float(np.nanmax(np.abs(out - outputs[0]))):.2g}"
            cells.append(f"{np.median(ratios):.3f} ({ratios[0]:.3f}–{ratios[-1]:.3f}), {same}")
        print(f"| {shape} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
