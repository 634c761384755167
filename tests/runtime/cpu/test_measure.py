"""`fusecc report --measure` (driver/measure.py): the program compiled
unfused and fused for the CPU, run on the same inputs, checked against the
reference interpreter. Structure and figures that do not depend on the
clock are asserted; timings never are. The golden of the text report is
tests/filecheck/tools/fusecc/report_measure.ir."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.compiler.parser import parse_module
from fusecc.driver import reporting
from fusecc.driver import measure, measured_call, measured_variants, measurers
from fusecc.runtime.reference import evaluate
from fusecc.tools import fusecc as driver

# examples/mlp.ir at a small size, with a residual and a LayerNorm.
BLOCK = """\
func.func @block(%x: tensor<16x64xf32>, %w1: tensor<64x128xf32>, %b1: tensor<128xf32>, %w2: tensor<128x64xf32>, %b2: tensor<64xf32>, %g: tensor<64xf32>, %beta: tensor<64xf32>) -> tensor<16x64xf32> {
  %h = tensor.matmul %x, %w1 : (tensor<16x64xf32>, tensor<64x128xf32>) -> tensor<16x128xf32>
  %hb = tensor.add %h, %b1 : (tensor<16x128xf32>, tensor<128xf32>) -> tensor<16x128xf32>
  %a = tensor.gelu %hb {approximate = "tanh"} : (tensor<16x128xf32>) -> tensor<16x128xf32>
  %o = tensor.matmul %a, %w2 : (tensor<16x128xf32>, tensor<128x64xf32>) -> tensor<16x64xf32>
  %ob = tensor.add %o, %b2 : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %r = tensor.add %ob, %x : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x64xf32>
  %y = tensor.layernorm %r, %g, %beta : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  func.return %y : tensor<16x64xf32>
}
"""

# An elementwise chain with a reduction and a returned intermediate (two results).
CHAIN = """\
func.func @main(%x: tensor<8x40xf32>, %s: tensor<40xf32>) -> (tensor<8x40xf32>, tensor<8x1xf32>) {
  %m = tensor.mul %x, %s : (tensor<8x40xf32>, tensor<40xf32>) -> tensor<8x40xf32>
  %t = tensor.tanh %m : (tensor<8x40xf32>) -> tensor<8x40xf32>
  %e = tensor.exp %t : (tensor<8x40xf32>) -> tensor<8x40xf32>
  %sum = tensor.reduce_sum %e {axes = [1], keepdims = true} : (tensor<8x40xf32>) -> tensor<8x1xf32>
  func.return %t, %sum : tensor<8x40xf32>, tensor<8x1xf32>
}
"""

REPEAT = 2


@pytest.fixture(scope="module")
def block_report():
    return measure.measure(parse_module(BLOCK), "block", repeat=REPEAT, threads=1)


def model_report(text: str, target: str = "cpu") -> dict:
    return reporting.report_data(parse_module(text), target, DiagnosticEngine())


@pytest.mark.parametrize("text, entry", [(BLOCK, "block"), (CHAIN, "main")], ids=["block", "chain"])
def test_launch_counts_are_the_fusion_groups_and_the_ops(text, entry):
    data = measure.measure(parse_module(text), entry, repeat=1, threads=1)
    model = model_report(text)
    fused, unfused = data["measured"]["fused"], data["measured"]["unfused"]
    assert fused["launches"] == fused["groups"] == len(model["groups"]) == model["after"]["kernels"]
    assert unfused["launches"] == unfused["groups"] == model["before"]["kernels"]
    assert [k["group"] for k in fused["kernels"]] == [g["id"] for g in model["groups"]]
    assert [k["kind"] for k in fused["kernels"]] == [g["kind"] for g in model["groups"]]
    assert fused["launches"] < unfused["launches"]
    assert fused["agrees"] and unfused["agrees"]


def test_the_block_fuses_into_two_matmuls_and_a_layernorm(block_report):
    kernels = block_report["measured"]["fused"]["kernels"]
    assert [(k["name"], k["names"]) for k in kernels] == [
        ("fused_0_matmul", ["%h", "%hb", "%a"]),
        ("fused_1_matmul", ["%o", "%ob", "%r"]),
        ("fused_2_reduction", ["%y"]),
    ]
    unfused = block_report["measured"]["unfused"]["kernels"]
    assert [k["names"] for k in unfused] == [["%h"], ["%hb"], ["%a"], ["%o"], ["%ob"], ["%r"], ["%y"]]


def test_bytes_from_the_loop_kernels_match_the_cost_model_here(block_report):
    """Two independent counts: the loop kernels' loads and stores, and the
    cost model's group inputs and outputs. On this program (no broadcast
    re-reads, no scratch) they agree kernel by kernel."""
    for variant in block_report["measured"].values():
        for k in variant["kernels"]:
            assert k["bytes_read"] + k["bytes_written"] == k["modelled_bytes"], k["name"]
        assert variant["bytes_moved"] == sum(k["bytes_read"] + k["bytes_written"] for k in variant["kernels"])
    model = block_report["model"]
    assert block_report["measured"]["unfused"]["bytes_moved"] == model["before"]["bytes_moved"]
    assert block_report["measured"]["fused"]["bytes_moved"] == model["after"]["bytes_moved"]
    x, w1, b1, h = 16 * 64 * 4, 64 * 128 * 4, 128 * 4, 16 * 128 * 4
    first = block_report["measured"]["fused"]["kernels"][0]
    assert (first["bytes_read"], first["bytes_written"]) == (x + w1 + b1, h)


def test_memory_figures_come_from_the_memory_plan(block_report):
    unfused, fused = block_report["measured"]["unfused"], block_report["measured"]["fused"]
    # Fused, the intermediates are %a and %r (16x128 and 16x64 floats, 64-byte aligned).
    assert fused["naive_bytes"] == 16 * 128 * 4 + 16 * 64 * 4
    assert unfused["naive_bytes"] > fused["naive_bytes"]
    for variant in (unfused, fused):
        assert 0 < variant["arena_bytes"] <= variant["naive_bytes"]
    assert block_report["model"]["after"]["intermediate_bytes"] == fused["naive_bytes"]


def test_every_step_is_timed_once_per_run(block_report):
    for variant in block_report["measured"].values():
        assert len(variant["run_seconds"]) == REPEAT
        assert sum(k["share"] for k in variant["kernels"]) == pytest.approx(1.0)
        assert variant["step_seconds"] == pytest.approx(sum(k["seconds"] for k in variant["kernels"]))


def test_unfused_and_fused_programs_agree_with_each_other_and_the_reference():
    engine = DiagnosticEngine()
    measurer = measurers.measurer_for("cpu", threads=1)
    program = parse_module(CHAIN)
    variants = [measured_variants.compile_variant(program, "main", measurer, fused, engine) for fused in (False, True)]
    assert [len(v.steps) for v in variants] == [4, 1]  # mul, tanh, exp, reduce_sum; then one reduction writing %t and %sum
    inputs = measured_call.model_inputs(program.lookup("main"), seed=3)
    want = evaluate(program, "main", inputs)  # the program itself is left unchanged
    unfused, fused = (v.program.run(inputs, "main") for v in variants)
    for u, f, w in zip(unfused, fused, want, strict=True):
        scale = float(np.max(np.abs(w)))
        np.testing.assert_allclose(f, u, rtol=0, atol=measured_call.PROGRAM_RTOL * scale)
        np.testing.assert_allclose(f, w, rtol=0, atol=measured_call.PROGRAM_RTOL * scale)
    assert measured_call.compare(fused, want) <= measured_call.PROGRAM_RTOL


def test_compare_catches_wrong_shapes_nans_and_values():
    want = [np.array([1.0, -2.0, np.nan], np.float32)]
    assert measured_call.compare([want[0].copy()], want) == 0.0
    assert measured_call.compare([np.array([1.0, -2.0, 0.0], np.float32)], want) == float("inf")  # NaN lost
    assert measured_call.compare([np.array([1.0, -2.1, np.nan], np.float32)], want) == pytest.approx(0.05, rel=1e-5)
    assert measured_call.compare([np.zeros(2, np.float32)], want) == float("inf")
    assert measured_call.compare([np.array([1, 2], np.int32)], [np.array([1, 3], np.int32)]) == float("inf")


@pytest.fixture
def block_file(tmp_path):
    path = tmp_path / "block.ir"
    path.write_text(BLOCK)
    return path


def test_the_json_report_parses(block_file, capsys):
    assert driver.main(["report", str(block_file), "--measure", "--json", "--repeat", "1", "--threads", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["target"] == "cpu" and data["entry"] == "block" and data["repeat"] == 1
    assert set(data["measured"]) == {"unfused", "fused"}
    assert data["model"]["after"]["kernels"] == data["measured"]["fused"]["launches"] == 3
    assert data["unfused"] == []
    row = data["measured"]["fused"]["kernels"][2]
    assert set(row) >= {"name", "kind", "group", "seconds", "share", "bytes_read", "bytes_written", "gb_per_second", "modelled_seconds", "ops"}
    assert row["ops"] == ["tensor.layernorm"]


def test_the_text_report_can_list_the_unfused_kernels(block_file, capsys):
    assert driver.main(["report", str(block_file), "--measure", "--repeat", "1", "--threads", "1", "--all-kernels"]) == 0
    out = capsys.readouterr().out
    unfused = out.split("kernels (unfused):\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(unfused) == 1 + 7 and unfused[2].split()[:2] == ["fused_1_elementwise", "elementwise"]


def test_measuring_needs_the_cpu_target(block_file, capsys):
    assert driver.main(["report", str(block_file), "--measure", "--target", "cuda"]) == 1
    err = capsys.readouterr().err
    assert "only the CPU target can be measured here (use --target cpu)" in err and "Traceback" not in err


def test_bad_repetitions_are_a_usage_error(block_file, capsys):
    assert driver.main(["report", str(block_file), "--measure", "--repeat", "0"]) == 1
    assert "--repeat must be at least 1" in capsys.readouterr().err


def test_results_that_disagree_with_the_reference_are_an_internal_error(block_file, capsys, monkeypatch):
    """The check can fail: with a wrong reference, both programs disagree."""
    real = measure.evaluate
    monkeypatch.setattr(measure, "evaluate", lambda *args: [r + 1 for r in real(*args)])
    assert driver.main(["report", str(block_file), "--measure", "--repeat", "1", "--threads", "1"]) == 2
    out, err = capsys.readouterr()
    assert "(tolerance 1e-04): DISAGREE" in out
    assert "the unfused and fused program's results differ from the reference interpreter" in err
