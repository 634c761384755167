"""The cost model reads of a gathered table only the rows gathered: an
embedding lookup costs its result, not the vocabulary."""

from __future__ import annotations

from fusecc.compiler import parse_module, verify
from fusecc.passes.backends.hardware import CPU
from fusecc.passes.fusion import cost_model as cm

LOOKUP = """
func.func @main(%table: tensor<30000x64xf32>, %ids: tensor<4x8xi64>, %x: tensor<4x8x64xf32>) -> (tensor<4x8x64xf32>, tensor<30000x64xf32>) {
  %0 = tensor.gather %table, %ids {axis = 0} : (tensor<30000x64xf32>, tensor<4x8xi64>) -> tensor<4x8x64xf32>
  %1 = tensor.add %0, %x : (tensor<4x8x64xf32>, tensor<4x8x64xf32>) -> tensor<4x8x64xf32>
  %2 = tensor.neg %table : (tensor<30000x64xf32>) -> tensor<30000x64xf32>
  func.return %1, %2 : tensor<4x8x64xf32>, tensor<30000x64xf32>
}
"""


def ops():
    module = parse_module(LOOKUP)
    verify(module)
    return list(module.lookup("main").body)[:3]


def test_a_gathered_table_costs_the_rows_read():
    gather, add, _ = ops()
    cost = cm.estimate_ops([gather, add], CPU)
    rows = 4 * 8 * 64 * 4
    assert cost.bytes_read == rows + 4 * 8 * 8 + rows  # table rows, ids, x
    assert cost.bytes_written == rows


def test_a_table_also_read_whole_costs_all_of_it():
    gather, _, neg = ops()
    cost = cm.estimate_ops([gather, neg], CPU)
    assert cost.bytes_read == 30000 * 64 * 4 + 4 * 8 * 8
