"""The CUDA backend's table (passes/backends/cuda/op_table.py) renders every
legal op and nothing else, and the renderer refuses IR that legalize has not
made legal rather than print C with the wrong meaning."""

from __future__ import annotations

import pytest

from fusecc.compiler import parse_module, verify
from fusecc.passes.backends.cuda.emit import EmitError, emit_cuda, render_cuda
from fusecc.passes.backends.cuda.op_table import CODE_FOR_OP
from fusecc.passes.backends.table import LEGAL_KEYS, missing_entries


def test_the_cuda_table_covers_every_legal_op():
    assert missing_entries(CODE_FOR_OP) == []


def test_the_cuda_table_has_no_key_outside_the_legal_set():
    assert set(CODE_FOR_OP) <= LEGAL_KEYS


NARROW_ADD = """
loop.kernel @add_bf16 {group = 0, kind = "elementwise"} {
^bb0(%x: memref<32xbf16>, %y: memref<32xbf16>):
  loop.parallel {upper = [1], mapping = ["block.x"]} {
  ^bb0(%b: index):
    loop.parallel {upper = [32], mapping = ["thread.x"]} {
    ^bb0(%t: index):
      %v = loop.load %x, %t : (memref<32xbf16>, index) -> bf16
      %s = arith.add %v, %v : (bf16, bf16) -> bf16
      loop.store %s, %y, %t : bf16, memref<32xbf16>, index
      loop.yield
    }
    loop.yield
  }
  loop.return
}
"""

I1_ADD = NARROW_ADD.replace("bf16", "i1")


@pytest.mark.parametrize("text", [NARROW_ADD, I1_ADD], ids=["bf16 add", "i1 add"])
def test_ir_that_is_not_legal_is_refused(text):
    module = parse_module(text, "illegal.ir")
    verify(module)
    with pytest.raises(EmitError, match="not legal CUDA-level IR.*run legalize first"):
        render_cuda(module)


@pytest.mark.parametrize("text", [NARROW_ADD, I1_ADD], ids=["bf16 add", "i1 add"])
def test_emit_cuda_legalizes_first(text):
    module = parse_module(text, "illegal.ir")
    verify(module)
    source = emit_cuda(module).text
    assert ("fusecc_round_bf16" in source) if "bf16" in text else (" || " in source)
