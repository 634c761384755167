"""fusecc against xDSL on the same programs, on this machine.

xDSL is not a dependency: install it in a throwaway environment and point
this script at that Python, e.g.

    python3 -m venv /tmp/xdsl-venv && /tmp/xdsl-venv/bin/pip install xdsl
    python benchmarks/compare_xdsl.py --xdsl-python /tmp/xdsl-venv/bin/python

The programs are those of parse_scaling.py, printed by fusecc in MLIR's
generic form with the tensor ops renamed into an unregistered `fc` dialect
(xDSL's own `tensor` dialect has other ops), so xDSL parses them with
`allow_unregistered=True` while registering builtin and func. Both sides
parse, verify and print; times are CPU seconds, best of N.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from fusecc.compiler.parser import parse_module
from fusecc.compiler.printer import print_op

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parse_scaling import measure, program  # noqa: E402

XDSL_SIDE = r"""
import gc, io, json, sys, time
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin
from xdsl.dialects.func import Func
from xdsl.parser import Parser
from xdsl.printer import Printer

def run(text):
    ctx = Context(allow_unregistered=True)
    ctx.load_dialect(Builtin)
    ctx.load_dialect(Func)
    gc.collect()
    start = time.process_time()
    module = Parser(ctx, text).parse_module()
    parsed = time.process_time()
    module.verify()
    verified = time.process_time()
    Printer(stream=io.StringIO()).print_op(module)
    done = time.process_time()
    return {"parse": parsed - start, "verify": verified - parsed, "print": done - verified, "total": done - start}

path, repeat = sys.argv[1], int(sys.argv[2])
text = open(path).read()
print(json.dumps(min((run(text) for _ in range(repeat)), key=lambda r: r["total"])))
"""


def generic_text(size: int) -> str:
    text = print_op(parse_module(program(size)), generic=True)
    return text.replace('"tensor.', '"fc.')


def main() -> None:
    parser = argparse.ArgumentParser(description="fusecc vs xDSL: parse+verify+print time")
    parser.add_argument("--xdsl-python", required=True, help="a Python with xdsl installed")
    parser.add_argument("--sizes", default="1000,5000,20000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    parse_module(program(100))
    print(f"{'ops':>7} {'fusecc s':>9} {'xdsl s':>8} {'xdsl/fusecc':>12}   (parse / verify / print, CPU seconds)")
    for size in (int(s) for s in args.sizes.split(",")):
        ours = min((measure(program(size)) for _ in range(args.repeat)), key=lambda r: r["total"])
        with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as f:
            f.write(generic_text(size))
        try:
            proc = subprocess.run([args.xdsl_python, "-c", XDSL_SIDE, f.name, str(args.repeat)], capture_output=True, text=True)
        finally:
            os.unlink(f.name)
        if proc.returncode:
            sys.exit(f"xDSL failed:\n{proc.stderr[-3000:]}")
        theirs = json.loads(proc.stdout)
        print(
            f"{ours['ops']:>7} {ours['total']:>9.3f} {theirs['total']:>8.3f} {theirs['total'] / ours['total']:>11.1f}x"
            f"   fusecc {ours['parse']:.2f}/{ours['verify']:.2f}/{ours['print']:.2f}"
            f"  xdsl {theirs['parse']:.2f}/{theirs['verify']:.2f}/{theirs['print']:.2f}"
        )


if __name__ == "__main__":
    main()
