"""docs/cuda-performance.md's generated tables: the H200 cost model's time of
each kernel beside its roofline bound, and the offline counters of the
attention kernels. Each table lies between markers

    <!-- generated: NAME (python benchmarks/cuda_roofline.py) -->
    ...
    <!-- /generated: NAME -->

    python benchmarks/cuda_roofline.py                 # print every table
    python benchmarks/cuda_roofline.py --write         # rewrite them in docs/cuda-performance.md
    python benchmarks/cuda_roofline.py --write --only attention-counters --as attention-counters-before
                                                       # the same table, from another checkout of fusecc

Tables: `roofline-encoder` and `roofline-llama` (`fusecc report --gpu h200
--json` of examples/encoder_block.ir and llama_block.ir: per kernel the
modelled time without its launch, the roofline bound, their ratio, the pipe
that bounds it, and each kernel's share of the gap), `attention-counters`
(`fusecc report --counters --arch sm_90` of every attention kernel of the
examples). `--as` writes a table under another name: run with an older
fusecc on PYTHONPATH, it fills the "before" table of the same figures.
No GPU is used: the counters come from the CPU harness (about 15 s per example).
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "cuda-performance.md"
EXAMPLES = ROOT / "examples"
BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) \(python benchmarks/cuda_roofline.py\) -->\n)(?P<body>.*?)(<!-- /generated: (?P=name) -->)", re.S)
ATTENTION_EXAMPLES = ("attention.ir", "encoder_block.ir", "llama_block.ir")


def _module(name: str):
    from fusecc.compiler import parse_module

    path = EXAMPLES / name
    return parse_module(path.read_text(), str(path))


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"


def roofline_table(example: str) -> str:
    """The kernels of `example` against the H200 roofline, and their totals."""
    from fusecc.compiler.diagnostics import DiagnosticEngine
    from fusecc.driver.reporting import describe_ops, report_data
    from fusecc.passes.backends.hardware import HARDWARE

    data = report_data(_module(example), "h200", DiagnosticEngine())
    groups, totals = data["groups"], data["roofline"]
    overhead = HARDWARE["h200"].launch_overhead
    gap = sum(g["kernel_seconds"] - g["roofline_seconds"] for g in groups)
    lines = [
        f"`fusecc report examples/{example} --gpu h200 --json`, H200: {totals['memory_bandwidth'] / 1e12:.1f} TB/s, FMA {totals['peak_flops'] / 1e12:.0f} TFLOP/s, tensor cores {totals['peak_tensor_flops'] / 1e12:.0f} TFLOP/s.",
        "",
        "| group | kind | modelled µs | roofline µs | ratio | bound | unit | blocks | occupancy | waves | share of the gap | ops |",
        "|---:|---|---:|---:|---:|---|---|---:|---:|---:|---:|---|",
    ]
    for g in groups:
        share = (g["kernel_seconds"] - g["roofline_seconds"]) / gap if gap > 0 else 0.0
        ops = describe_ops(g)
        ops = ops if len(ops) <= 60 else ops[:57] + "..."
        lines.append(
            f"| {g['id']} | {g['kind']} | {_us(g['kernel_seconds'])} | {_us(g['roofline_seconds'])} | {g['roofline_ratio']:.1f}x | {g['bound']} | {g['unit']} | "
            f"{g['blocks']} | {g['theoretical_occupancy']:.0%} | {g['waves']:.2f} | {share:.0%} | {ops} |"
        )
    lines += [
        f"| all | | {_us(totals['kernel_seconds'])} | {_us(totals['roofline_seconds'])} | {totals['ratio']:.2f}x | | | | | | 100% | |",
        "",
        f"With the launches ({_us(totals['launch_seconds'])} µs, {round(totals['launch_seconds'] / overhead)} launches at {overhead * 1e6:.0f} µs; split-K and split-KV launch two): "
        f"{_us(totals['kernel_seconds'] + totals['launch_seconds'])} µs, {totals['ratio_with_launches']:.2f}x the roofline.",
        "",
    ]
    return "\n".join(lines)


def attention_counters() -> str:
    """The offline counters of every attention kernel of the examples."""
    import numpy as np

    from fusecc.compiler.pass_manager import PassContext
    from fusecc.driver.cuda_level import build_manifest
    from fusecc.driver.cuda_target import lower_to_cuda
    from fusecc.passes.backends.hardware import hardware
    from fusecc.runtime.cuda.counters import kernel_counters
    from fusecc.runtime.reference import random_input

    h200 = hardware("h200")
    lines = [
        "| example | kernel | blocks | threads | shared B | bank ways | sector efficiency | registers | spills | occupancy | waves |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for example in ATTENTION_EXAMPLES:
        module = _module(example)
        func = module.functions()[0]
        rng = np.random.default_rng(0)  # the inputs `fusecc report --counters` uses
        inputs = [random_input(t, rng) for t in func.function_type.inputs]
        cuda = lower_to_cuda(module, "sm_90", PassContext(target="h200"))
        manifest = build_manifest(module, cuda, "kernels.cu", "sm_90", func.sym_name)
        for row in kernel_counters(cuda, manifest, inputs, h200):
            if "attention" not in row.name:
                continue

            def number(value, spec):
                return "n/a" if value is None else format(value, spec)

            lines.append(
                f"| {example} | {row.name} | {row.grid_blocks} | {row.threads_per_block} | {row.shared_bytes} | {number(row.shared_bank_conflict_ways, '.2f')} | "
                f"{number(row.global_sector_efficiency, '.2f')} | {number(row.registers, 'd')} | {number(row.spills, 'd')} | "
                f"{number(row.theoretical_occupancy, '.0%')} | {number(row.waves, '.2f')} |"
            )
    return "\n".join(lines) + "\n"


def attention_alternatives(example: str = "encoder_block.ir") -> str:
    """The attention of `example` (after fusion) under the chooser's tile and
    under every alternative that gives at least one block per SM: split-KV
    in 2 or 4, a smaller query tile, fewer rows per thread (BQ = 16 over 128
    threads: R = 1, which the chooser's tile list leaves out where the
    queries fill more than one tile); and the unsplit tiles whose grid falls
    short of the SMs, which the chooser sets aside while any grid fills them
    (`gpu_matmul_tiles.full_wave_first`). The modelled time is the chooser's
    (`attention_tiles.attention_seconds`: the busiest SM, plus a split's second
    launch and partial results); shared loads per FMA are the main loop's
    (`attention_shared_requests`), which issue 13.3 bounds at 1:4."""
    from dataclasses import replace

    from fusecc.compiler.diagnostics import DiagnosticEngine
    from fusecc.driver.reporting import report_data
    from fusecc.passes.backends.hardware import HARDWARE
    from fusecc.passes.tiling.attention_tiles import (
        GPU_ATTENTION_TILES,
        AttentionTiles,
        attention_blocks,
        attention_seconds,
        attention_shared_requests,
        attention_stages,
        choose_gpu_attention_tiles,
        gpu_attention_resources,
    )
    from fusecc.passes.tiling.contraction_shapes import AttentionShape, resource_problem

    h200 = HARDWARE["h200"]
    module = _module(example)
    report_data(module, "h200", DiagnosticEngine())  # leaves `module` fused: its attention op
    problem = AttentionShape.of_op(next(op for op in module.walk() if op.name == "tensor.attention"))
    chosen = choose_gpu_attention_tiles(problem, h200)

    def blocks(tiles) -> int:
        return attention_blocks(problem, tiles)

    options = []
    for bq, threads in dict.fromkeys((*GPU_ATTENTION_TILES, (16, 128))):
        for splits in (1, 2, 4):
            tiles = AttentionTiles(bq, chosen.block_t, threads, splits)
            tiles = replace(tiles, stages=attention_stages(tiles, problem, h200))
            if resource_problem(gpu_attention_resources(tiles, problem), h200, "attention") is None and (tiles == chosen or splits == 1 or blocks(tiles) >= h200.sm_count):
                options.append(tiles)
    base = attention_seconds(problem, chosen, h200)
    batch = "×".join(map(str, problem.batch))
    lines = [
        f"examples/{example}: attention over {batch} heads, S = T = {problem.s}, D = {problem.d}; H200, {h200.sm_count} SMs.",
        "",
        "| BQ × BT, threads | rows a thread | split-KV | blocks | K/V buffers | modelled µs | vs chosen | shared loads per FMA | |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for tiles in sorted(options, key=lambda t: (t != chosen, attention_seconds(problem, t, h200))):
        seconds = attention_seconds(problem, tiles, h200)
        loads, fmas = attention_shared_requests(tiles, problem)
        reasons = [why for why, holds in (("short of a full wave", blocks(tiles) < h200.sm_count), ("over 1:4 loads", loads * 4 > fmas)) if holds]
        if tiles == chosen:
            verdict = "chosen"
        elif seconds >= base:
            verdict = ", ".join(["slower", *reasons])
        else:
            verdict = "faster" + (", but " + " and ".join(reasons) if reasons else "")
        lines.append(
            f"| {tiles.block_q} × {tiles.block_t}, {tiles.threads} | {tiles.rows_per_thread} | {tiles.splits} | {blocks(tiles)} | {tiles.stages} | "
            f"{_us(seconds)} | {seconds / base:.2f}x | 1:{fmas / loads:.1f} | {verdict} |"
        )
    return "\n".join(lines) + "\n"


TABLES = {
    "roofline-encoder": lambda: roofline_table("encoder_block.ir"),
    "roofline-llama": lambda: roofline_table("llama_block.ir"),
    "attention-counters": attention_counters,
    "attention-alternatives": attention_alternatives,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help=f"rewrite the tables in {DOC.relative_to(ROOT)}")
    p.add_argument("--only", choices=sorted(TABLES), action="append", help="only these tables (repeatable)")
    p.add_argument("--as", dest="as_name", help="write the one --only table under this name (a 'before' table)")
    args = p.parse_args(argv)
    names = args.only or sorted(TABLES)
    if args.as_name and len(names) != 1:
        p.error("--as renames exactly one --only table")
    bodies = {args.as_name or name: TABLES[name]() for name in names}
    if not args.write:
        for name, body in bodies.items():
            print(f"## {name}\n\n{body}")
        return 0
    text = DOC.read_text()
    found = {m.group("name") for m in BLOCK.finditer(text)}
    missing = sorted(set(bodies) - found)
    if missing:
        raise SystemExit(f"{DOC} lacks the generated blocks {missing}")
    DOC.write_text(BLOCK.sub(lambda m: m.group(1) + bodies[m.group("name")] + m.group(4) if m.group("name") in bodies else m.group(0), text))
    print(f"rewrote {', '.join(bodies)} in {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
