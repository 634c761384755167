"""How canonicalize, cse and dce scale with program size.

    python benchmarks/pass_scaling.py [--sizes 1000,5000,20000] [--repeat 3]

Times each pass in CPU time (best of --repeat runs, each on a fresh program) on random
programs from tests/program_gen.py that return every unused value, so that
all ops are live and the passes cannot shortcut by deleting everything. It
prints the time per op (of the input) and that time relative to the
smallest size, which stays near 1 when a pass is linear, twice: with
Python's cyclic garbage collector on (as the passes run today) and off
(what remains is the passes' own work plus cache effects).
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import sys
import time
import warnings

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))

from program_gen import random_program  # noqa: E402

from fusecc.compiler.pass_manager import PassContext, parse_pipeline  # noqa: E402

PIPELINES = ("canonicalize", "cse", "dce", "canonicalize,cse,dce")


def best_time(programs: list, pipeline: str, collect: bool) -> tuple[float, int]:
    best = float("inf")
    for program in programs:
        module = program.module.clone()
        ops = program.num_ops
        manager = parse_pipeline(pipeline)
        if not collect:
            gc.disable()
        start = time.process_time()
        for p in manager.passes():
            p.run(module, PassContext())
        best = min(best, time.process_time() - start)
        gc.enable()
    return best, ops


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,5000,20000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)  # NaNs met by constant folding
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'':<30}{'--- gc on ---':>26}{'--- gc off ---':>26}")
    print(f"{'pipeline':<22}{'ops':>8}" + f"{'seconds':>10}{'µs/op':>8}{'ratio':>8}" * 2)
    programs = {size: [random_program(seed, size, return_all=True) for seed in range(args.repeat)] for size in sizes}
    gc.freeze()  # the originals are only cloned; keep the collector off them
    for pipeline in PIPELINES:
        first = {}
        for size in sizes:
            row = f"{pipeline:<22}"
            for collect in (True, False):
                seconds, ops = best_time(programs[size], pipeline, collect)
                per_op = seconds / ops * 1e6
                first.setdefault(collect, per_op)
                row += ("" if not collect else f"{ops:>8}") + f"{seconds:>10.3f}{per_op:>8.1f}{per_op / first[collect]:>7.2f}x"
            print(row)


if __name__ == "__main__":
    main()
