"""Issue 14.7: docs/language.md is the language reference in the repository.
Its op table is generated from the op classes (stale = failure), every
registered tensor op and each of its attributes appears, the code in it
parses, and the README links it instead of the spec outside the repository."""

from __future__ import annotations

import pathlib
import re

import pytest

from fusecc.compiler.parser import parse_module
from fusecc.compiler.verifier import verify
from fusecc.tools import language_reference

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "language.md"


def test_the_generated_op_table_is_up_to_date(capsys):
    assert language_reference.main(["--check", str(DOC)]) == 0, capsys.readouterr().err


def test_the_check_fails_on_a_stale_table(tmp_path, capsys):
    stale = tmp_path / "language.md"
    stale.write_text(DOC.read_text().replace("| `tensor.add` |", "| `tensor.plus` |"))
    assert language_reference.main(["--check", str(stale)]) == 1
    assert "stale" in capsys.readouterr().err


def test_every_registered_tensor_op_and_attribute_is_in_the_reference():
    text = DOC.read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(tensor\.\w+)` \|.*$", text, re.M)}
    ops = language_reference.tensor_ops()
    assert set(rows) == set(ops)
    assert len(ops) >= 39
    for name, cls in ops.items():
        for attr in cls.attr_defs:
            assert f"`{attr.name}`" in rows[name], (name, attr.name)
        for operand in cls.operand_defs:
            assert f"`{operand.name}`" in rows[name], (name, operand.name)
        assert (cls.__doc__ or "").strip(), f"{name} has no docstring, so no semantics in the reference"


def test_the_code_in_the_reference_parses():
    text = DOC.read_text()
    blocks = re.findall(r"```mlir\n(.*?)```", text, re.S)
    first = blocks[0]
    verify(parse_module(first, "language.md"))
    constants = [line for line in blocks[1].splitlines() if "dense<" in line]
    assert len(constants) == 3
    for line in constants:
        program = f"func.func @f() {{\n  {line}\n  func.return\n}}\n"
        verify(parse_module(program, "language.md"))
    for form in re.findall(r"^\| `(loc\(.*?\))` \|", text, re.M):
        program = f'func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {{\n  %y = tensor.neg %x : (tensor<2xf32>) -> tensor<2xf32> {form}\n  func.return %y : tensor<2xf32>\n}}\n'
        verify(parse_module(program, "language.md"))


def test_the_readme_links_the_reference_and_not_the_outside_spec():
    readme = (ROOT / "README.md").read_text()
    assert "(docs/language.md)" in readme
    assert "../shared" not in readme
