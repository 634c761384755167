"""fusecc against xDSL on the same programs, on this machine.

xDSL is not a dependency: install it in a throwaway environment and point
this script at that Python, e.g.

    python3 -m venv /tmp/xdsl-venv && /tmp/xdsl-venv/bin/pip install xdsl
    python benchmarks/compare_xdsl.py --xdsl-python /tmp/xdsl-venv/bin/python

The programs are those of parse_scaling.py, printed by fusecc in MLIR's
generic form (`"tensor.add"(%a, %b) : (...) -> ...`). Both sides read that
same file: xDSL registers builtin and func and takes the tensor ops as
unregistered ops (`allow_unregistered=True`; xDSL's own tensor dialect is
not loaded). xDSL cannot read the custom form of our ops (an unregistered op
has no custom format), so fusecc's time on its custom form is shown beside,
for reference only. Every run is a fresh process on both sides (no memo
table is warm from an earlier run); each side parses, verifies and prints;
times are CPU seconds, the median of N runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from fusecc.compiler.parser import parse_module
from fusecc.compiler.printer import print_op

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parse_scaling import measure_cold, program  # noqa: E402

XDSL_SIDE = r"""
import gc, io, json, sys, time
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin
from xdsl.dialects.func import Func
from xdsl.parser import Parser
from xdsl.printer import Printer

ctx = Context(allow_unregistered=True)
ctx.load_dialect(Builtin)
ctx.load_dialect(Func)
text = open(sys.argv[1]).read()
gc.collect()
start = time.process_time()
module = Parser(ctx, text).parse_module()
parsed = time.process_time()
module.verify()
verified = time.process_time()
Printer(stream=io.StringIO()).print_op(module)
done = time.process_time()
print(json.dumps({"parse": parsed - start, "verify": verified - parsed, "print": done - verified, "total": done - start}))
"""


def xdsl_cold(python: str, path: str) -> dict:
    proc = subprocess.run([python, "-c", XDSL_SIDE, path], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"xDSL failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def median_run(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda r: r["total"])[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description="fusecc vs xDSL: parse+verify+print time of the same generic-form text")
    parser.add_argument("--xdsl-python", required=True, help="a Python with xdsl installed")
    parser.add_argument("--sizes", default="1000,5000,20000")
    parser.add_argument("--repeat", type=int, default=3, help="fresh-process runs per side and size (the median is shown)")
    args = parser.parse_args()
    print(f"{'ops':>7} {'fusecc s':>9} {'xdsl s':>8} {'xdsl/fusecc':>12} {'fusecc custom s':>16}   (generic form on both sides; parse / verify / print, CPU seconds)")
    with tempfile.TemporaryDirectory() as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            custom = program(size)
            generic_path, custom_path = os.path.join(tmp, f"generic{size}.mlir"), os.path.join(tmp, f"custom{size}.ir")
            with open(generic_path, "w") as f:
                f.write(print_op(parse_module(custom), generic=True))
            with open(custom_path, "w") as f:
                f.write(custom)
            ours, theirs, ours_custom = [], [], []
            for _ in range(args.repeat):  # interleaved: a slow phase of the machine falls on both sides
                ours.append(measure_cold(generic_path))
                theirs.append(xdsl_cold(args.xdsl_python, generic_path))
                ours_custom.append(measure_cold(custom_path))
            a, b, c = median_run(ours), median_run(theirs), median_run(ours_custom)
            print(
                f"{a['ops']:>7} {a['total']:>9.3f} {b['total']:>8.3f} {b['total'] / a['total']:>11.1f}x {c['total']:>16.3f}"
                f"   fusecc {a['parse']:.2f}/{a['verify']:.2f}/{a['print']:.2f}"
                f"  xdsl {b['parse']:.2f}/{b['verify']:.2f}/{b['print']:.2f}"
                f"  (ranges: fusecc {min(r['total'] for r in ours):.3f}-{max(r['total'] for r in ours):.3f},"
                f" xdsl {min(r['total'] for r in theirs):.3f}-{max(r['total'] for r in theirs):.3f})"
            )


if __name__ == "__main__":
    main()
