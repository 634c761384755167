"""Compiler bugs are internal errors, exit 2, never the user's error (exit
1), even where they show at a place in the program (issue 16): IR that a
pass leaves invalid, and a group that fusion formed but its lowering
refuses. The located diagnostic is still printed, then the internal-error line."""

from __future__ import annotations

import pytest

from fusecc.passes.fusion.fuse import Fuse
from fusecc.passes.lowering.interface import TEMPLATES
from fusecc.passes.lowering.scalar_emitter import LoweringError
from fusecc.tools import fusecc as driver

PROGRAM = """\
func.func @main(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = tensor.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = tensor.exp %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %1 : tensor<4x8xf32>
}
"""


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "model.ir"
    path.write_text(PROGRAM)
    return path


def test_a_group_its_lowering_refuses_is_an_internal_error(program, tmp_path, monkeypatch, capsys):
    from fusecc.passes.lowering.driver import load_templates

    def refuse(group, hw):
        raise LoweringError("cannot do this one")

    load_templates()
    monkeypatch.setitem(TEMPLATES, "elementwise", refuse)
    code = driver.main(["run", str(program), "--random-inputs", "--target", "cpu", "-o", str(tmp_path / "out.npz")])
    err = capsys.readouterr().err
    assert code == 2
    assert "model.ir:2:3: error: cannot lower group 0 (elementwise): cannot do this one" in err
    assert "note: fusion formed a group its lowering cannot lower; this is a compiler bug" in err
    assert "fusecc run: internal compiler error in the lowering" in err
    assert "Traceback" not in err


def test_invalid_ir_after_a_pass_is_an_internal_error(program, tmp_path, monkeypatch, capsys):
    original = Fuse.run

    def breaking_run(self, op, context):
        original(self, op, context)
        for inner in op.walk():
            if inner.name == "func.return":
                inner.erase()  # a function without its terminator
                return

    monkeypatch.setattr(Fuse, "run", breaking_run)
    code = driver.main([str(program), "-o", str(tmp_path / "kernels.cu")])
    err = capsys.readouterr().err
    assert code == 2
    assert "note: the IR was invalid after pass 'fuse'; this is a compiler bug" in err
    assert "internal compiler error in pass 'fuse'" in err
    assert "Traceback" not in err
