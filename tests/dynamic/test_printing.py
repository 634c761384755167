"""What a pass builds on `?` dims prints so that it reads back: a reshape
whose result dims the text cannot tell again names them."""

from __future__ import annotations

from dynamic_programs import load

from fusecc.compiler.parser import parse_module
from fusecc.compiler.printer import print_op
from fusecc.compiler.types import TensorType
from fusecc.compiler.verifier import verify
from fusecc.dialects import tensor as T


def test_a_pass_made_split_of_b_times_s_rows_reads_back():
    module, func = load("encoder")
    ret = func.body.last_op
    y = ret.operands[0]
    batch, seq, width = y.type.shape
    flat = T.ReshapeOp.create([y], {}, [TensorType((batch * seq, width), y.type.element_type)])
    back = T.ReshapeOp.create([flat.result], {}, [y.type])
    func.body.insert_before(flat, ret)
    func.body.insert_before(back, ret)
    ret.set_operand(0, back.result)
    verify(module)
    text = print_op(module)
    lines = [line.strip() for line in text.splitlines() if "tensor.reshape" in line][-2:]
    assert "fusecc.dims" not in lines[0]  # B*S rows: the element count tells
    assert 'fusecc.dims = ["B", "S"]' in lines[1]  # B x S: only a name can tell
    again = next(iter(parse_module(text, "again.ir").body))
    assert [op.result.type.shape for op in again.body if op.name == "tensor.reshape"][-2:] == [flat.result.type.shape, y.type.shape]
