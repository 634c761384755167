"""print(parse(print(x))) == print(x), in the custom and the generic form,
for every valid program in the tests and examples."""

from __future__ import annotations

import pathlib

import pytest

from fusecc.compiler.parser import parse_module, split_input
from fusecc.compiler.printer import print_op
from fusecc.compiler.verifier import verify

ROOT = pathlib.Path(__file__).resolve().parent.parent


def valid_programs() -> list[pathlib.Path]:
    """Golden-test inputs that are expected to parse (no `not`, no
    --verify-diagnostics in their RUN lines), plus the examples."""
    found = sorted((ROOT / "examples").glob("*.ir"))
    for path in sorted((ROOT / "tests" / "filecheck").rglob("*.ir")):
        if "inputs" in path.parts or "Output" in path.parts:
            continue
        runs = [line for line in path.read_text().splitlines() if line.lstrip().startswith("// RUN:")]
        if any("not " in run or "--verify-diagnostics" in run for run in runs):
            continue
        found.append(path)
    return found


PROGRAMS = valid_programs()


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: str(p.relative_to(ROOT)))
def test_print_parse_print_is_stable(path):
    text = path.read_text()
    runs = "\n".join(line for line in text.splitlines() if "// RUN:" in line)
    chunks = split_input(text) if "--split-input-file" in runs else [(text, 0)]
    for chunk, offset in chunks:
        module = parse_module(chunk, str(path), offset)
        verify(module)
        custom = print_op(module)
        again = parse_module(custom)
        verify(again)
        assert print_op(again) == custom
        generic = print_op(module, generic=True)
        assert print_op(parse_module(generic)) == custom
        located = print_op(module, debuginfo=True)
        assert print_op(parse_module(located), debuginfo=True) == located
