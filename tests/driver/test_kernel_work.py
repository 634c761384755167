"""FLOPs are credited to the kernel that executes them (issue 11.4):
driver/kernel_work.py counts them from the loop IR, exactly, edge tiles
included; pack kernels and copies compute nothing."""

from __future__ import annotations

import pathlib

import pytest

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.compiler.parser import parse_module
from fusecc.dialects import loop
from fusecc.driver import measure
from fusecc.driver.kernel_work import credited_flops, kernel_work

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def loop_kernels(text: str, name: str = "test.ir") -> list[loop.KernelOp]:
    module = parse_module(text, name)
    variant_module = module.clone()
    from fusecc.driver import reporting
    from fusecc.compiler.pass_manager import PassContext, run_pipeline

    engine = DiagnosticEngine()
    reporting.report_data(variant_module, "cpu", engine)
    _, after_fuse = reporting.split_at_fuse("loop", "cpu")
    run_pipeline(after_fuse, variant_module, PassContext(diagnostics=engine, target="cpu"))
    return [op for op in variant_module.body if isinstance(op, loop.KernelOp)]


def matmul_bias(m: int, k: int, n: int) -> str:
    return f"""
func.func @main(%a: tensor<{m}x{k}xf32>, %b: tensor<{k}x{n}xf32>, %c: tensor<{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %0 = tensor.matmul %a, %b : (tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %1 = tensor.add %0, %c : (tensor<{m}x{n}xf32>, tensor<{n}xf32>) -> tensor<{m}x{n}xf32>
  func.return %1 : tensor<{m}x{n}xf32>
}}
"""


def padded(extent: int, tile: int) -> int:
    return -(-extent // tile) * tile


@pytest.mark.parametrize("m,k,n", [(17, 3, 129), (1, 1000, 17), (129, 384, 1000), (3, 17, 1)])
def test_matmul_executed_flops_count_padded_tiles(m, k, n):
    kernels = loop_kernels(matmul_bias(m, k, n))
    works = [kernel_work(kernel) for kernel in kernels]
    assert all(w.exact for w in works)
    executed = sum(w.flops for w in works)
    # one multiply and one add per (m, n, k), plus the bias add per (m, n), at least
    assert executed >= 2 * m * n * k + m * n
    # and no more than over tiles padded to 8 rows (the register tile) and 32 lanes
    assert executed <= (2 * k + 1) * padded(m, 8) * padded(n, 32)


def test_edge_tiles_are_walked_not_extrapolated():
    # 17x3 @ 3x129: three 8-row register tiles, five 32-lane column tiles
    kernels = loop_kernels(matmul_bias(17, 3, 129))
    assert sum(kernel_work(k).flops for k in kernels) == (2 * 3 + 1) * 24 * 160


class FakeStep:
    def __init__(self, name, group, executed_flops):
        self.name, self.group, self.executed_flops = name, group, executed_flops


def test_group_flops_credited_in_proportion_to_execution():
    # g0 is launched twice (once per piece of a horizontal group): each launch does half the group's work
    steps = [FakeStep("g0_pack_a", 0, 0.0), FakeStep("g0", 0, 300.0), FakeStep("g1", 1, 50.0), FakeStep("g1b", 1, 150.0), FakeStep("copy", None, 0.0), FakeStep("g0", 0, 300.0)]
    assert credited_flops(steps, {0: 200.0, 1: 100.0}) == [0.0, 100.0, 25.0, 75.0, 0.0, 100.0]


@pytest.mark.parametrize("m,k,n", [(17, 3, 129), (129, 384, 1000)])
def test_measured_report_credits_the_useful_flops_to_the_computing_kernel(m, k, n):
    module = parse_module(matmul_bias(m, k, n), "t.ir")
    data = measure.measure(module, "main", "cpu", repeat=1)
    kernels = data["measured"]["fused"]["kernels"]
    assert sum(k_["flops"] for k_ in kernels) == 2 * m * n * k + m * n


def test_pack_kernels_have_bytes_and_no_flops():
    kernels = loop_kernels((EXAMPLES / "mlp.ir").read_text(), "mlp.ir")
    by_name = {k.sym_name: kernel_work(k).flops for k in kernels}
    packs = [name for name in by_name if "_pack_" in name]
    assert packs, f"mlp.ir's second matmul packs its operands today: {sorted(by_name)}"
    assert all(by_name[name] == 0 for name in packs)
    # the second matmul (128x3072 @ 3072x768, + bias) is credited to its compute kernel alone
    assert by_name["fused_1_matmul"] == 2 * 128 * 768 * 3072 + 128 * 768


def test_measured_report_credits_flops_per_launch():
    module = parse_module((EXAMPLES / "mlp.ir").read_text(), "mlp.ir")
    data = measure.measure(module, "mlp", "cpu", repeat=1)
    kernels = {k["name"]: k for k in data["measured"]["fused"]["kernels"]}
    for name, k in kernels.items():
        if "_pack_" in name:
            assert k["flops"] == 0 and k["gflop_per_second"] is None and k["bytes_read"] > 0
        else:
            assert k["flops"] > 0 and k["gflop_per_second"] is not None


def test_reduction_flops_counted_per_element():
    text = """
func.func @main(%x: tensor<33x77xf32>) -> tensor<33xf32> {
  %0 = tensor.reduce_sum %x {axes = [1]} : (tensor<33x77xf32>) -> tensor<33xf32>
  func.return %0 : tensor<33xf32>
}
"""
    works = [kernel_work(k) for k in loop_kernels(text)]
    # a sum of 77 values is at least 76 additions per row; the lowering adds
    # 16-lane partial sums (77 padded to 80) and combines the lanes (< 32 more)
    assert 33 * 76 <= sum(w.flops for w in works) <= 33 * (80 + 32)
