"""Prints the loop module for the one fusion group of a file, lowered by its
kernel template alone (for golden tests of the templates; the driver's
`lower-to-loops` does this for whole programs). Usage: lower_group.py FILE TARGET"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[4] / "passes" / "lowering"))

from template_harness import lower_group  # noqa: E402

from fusecc.compiler import parse_module, print_op  # noqa: E402
from fusecc.compiler.hardware import hardware  # noqa: E402

module = parse_module(pathlib.Path(sys.argv[1]).read_text())
print(print_op(lower_group(module, hardware(sys.argv[2]))))
