"""How `fuse` scales with program size.

    python benchmarks/fusion_scaling.py [--max-ops 20000] [--repeat 3]

Builds a stack of BERT encoder layers written op by op
(examples/encoder_block_ops.ir, 54 tensor ops a layer, each layer's output
feeding the next) at several sizes up to --max-ops tensor ops, and times
parsing (cold: the parser's memo tables cleared first) and `fuse` (no
remarks) on each, best of --repeat runs. Near-linear
scaling shows as a flat microseconds-per-op column. Timings on shared CI
machines are noisy: compare the rows of one run, not runs of different days.
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import re
import time

from fusecc.passes.backends.hardware import H200
from fusecc.compiler.parser import clear_memo_tables, parse_module
from fusecc.compiler.verifier import verify
from fusecc.passes.fusion.fuse import fuse_module

LAYER = pathlib.Path(__file__).resolve().parent.parent / "examples" / "encoder_block_ops.ir"
NAME = re.compile(r"%([A-Za-z_][\w]*)")


def stack(layers: int) -> str:
    """One function applying `layers` encoder layers in sequence."""
    text = LAYER.read_text()
    start = text.index("func.func")
    header_end = text.index("{\n", start) + 2
    header = text[start:header_end]
    body = [line for line in text[header_end:].split("\n") if line.strip() and not line.strip().startswith("//")]
    body = [line for line in body if not line.strip().startswith(("func.return", "}"))]
    arguments = set(NAME.findall(header))
    out = [header.replace("@encoder_block", "@encoder_stack")]
    previous = "x"
    for layer in range(layers):
        def rename(match):
            name = match.group(1)
            if name == "x":
                return "%" + previous
            return match.group(0) if name in arguments else f"%{name}_{layer}"

        out.extend(NAME.sub(rename, line) for line in body)
        previous = f"y_{layer}"
    out.append(f"  func.return %{previous} : tensor<1x128x768xf32>")
    out.append("}")
    return "\n".join(out) + "\n"


def timed(work) -> tuple[float, object]:
    gc.collect()  # garbage of earlier runs (the IR is cyclic) would slow the collector inside this one
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-ops", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    per_layer = 54
    sizes = sorted({max(1, n // per_layer) for n in (args.max_ops // 8, args.max_ops // 4, args.max_ops // 2, args.max_ops)})
    print(f"{'layers':>7} {'ops':>7} {'parse s':>9} {'fuse s':>9} {'fuse us/op':>11} {'no-gc us/op':>12} {'groups':>7}")
    for layers in sizes:
        text = stack(layers)

        def parsed():
            clear_memo_tables()  # a cold parse: no spelling is remembered from another size or run
            module = parse_module(text)
            verify(module)
            return module

        parse_time, module = timed(parsed)
        ops = sum(1 for op in module.walk() if op.name.startswith("tensor.") and op.name != "tensor.constant")
        del module
        fuse_time = quiet_time = float("inf")
        for _ in range(args.repeat):
            for collector in (True, False):
                fresh = parsed()
                if not collector:
                    gc.disable()
                elapsed, result = timed(lambda: fuse_module(fresh, H200, explain=False))
                gc.enable()
                if collector:
                    fuse_time = min(fuse_time, elapsed)
                else:
                    quiet_time = min(quiet_time, elapsed)
                del fresh
        print(
            f"{layers:>7} {ops:>7} {parse_time:>9.2f} {fuse_time:>9.2f} {1e6 * fuse_time / ops:>11.1f}"
            f" {1e6 * quiet_time / ops:>12.1f} {len(result.groups):>7}"
        )


if __name__ == "__main__":
    main()
