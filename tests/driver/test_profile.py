"""driver/profile.py: per-kernel figures that respect physics, unfused
patterns with the fuser's reasons, the trace, and the GPU timing paths."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from fusecc.compiler.diagnostics import DiagnosticEngine
from fusecc.compiler.parser import parse_module
from fusecc.driver import gpu_measure, measure, measured_call, measured_variants, measurers, profile
from fusecc.passes.backends.hardware import hardware

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"

FORBID = """
func.func @main(%x: tensor<256x1024xf32>, %y: tensor<256x1024xf32>) -> tensor<256x1024xf32> {
  %a = tensor.exp %x : (tensor<256x1024xf32>) -> tensor<256x1024xf32>
  %b = tensor.add %a, %y {fusion.forbid = true} : (tensor<256x1024xf32>, tensor<256x1024xf32>) -> tensor<256x1024xf32>
  %c = tensor.mul %b, %b : (tensor<256x1024xf32>, tensor<256x1024xf32>) -> tensor<256x1024xf32>
  func.return %c : tensor<256x1024xf32>
}
"""

# The cost model refuses to recompute a cheap-to-store vector 4096 times
# (tests/filecheck/passes/fusion/explain-cpu.ir): two memory-bound kernels.
RECOMPUTE = """
func.func @main(%x: tensor<1024xf32>, %z: tensor<4096x1024xf32>) -> tensor<4096x1024xf32> {
  %0 = tensor.exp %x : (tensor<1024xf32>) -> tensor<1024xf32>
  %1 = tensor.tanh %0 : (tensor<1024xf32>) -> tensor<1024xf32>
  %2 = tensor.sigmoid %1 : (tensor<1024xf32>) -> tensor<1024xf32>
  %3 = tensor.erf %2 : (tensor<1024xf32>) -> tensor<1024xf32>
  %4 = tensor.exp %3 : (tensor<1024xf32>) -> tensor<1024xf32>
  %5 = tensor.tanh %4 : (tensor<1024xf32>) -> tensor<1024xf32>
  %6 = tensor.sigmoid %5 : (tensor<1024xf32>) -> tensor<1024xf32>
  %7 = tensor.erf %6 : (tensor<1024xf32>) -> tensor<1024xf32>
  %8 = tensor.add %z, %7 : (tensor<4096x1024xf32>, tensor<1024xf32>) -> tensor<4096x1024xf32>
  func.return %8 : tensor<4096x1024xf32>
}
"""


# Q, K and V of one BERT-base layer (B1 S128): one horizontal group, its
# matmul kernel launched once per piece.
QKV = """
func.func @main(%x: tensor<128x768xf32>, %wq: tensor<768x768xf32>, %wk: tensor<768x768xf32>, %wv: tensor<768x768xf32>) -> (tensor<128x768xf32>, tensor<128x768xf32>, tensor<128x768xf32>) {
  %q = tensor.matmul %x, %wq : (tensor<128x768xf32>, tensor<768x768xf32>) -> tensor<128x768xf32>
  %k = tensor.matmul %x, %wk : (tensor<128x768xf32>, tensor<768x768xf32>) -> tensor<128x768xf32>
  %v = tensor.matmul %x, %wv : (tensor<128x768xf32>, tensor<768x768xf32>) -> tensor<128x768xf32>
  func.return %q, %k, %v : tensor<128x768xf32>, tensor<128x768xf32>, tensor<128x768xf32>
}
"""
# Two layers whose Q/K/V are identical groups, so that the second runs the
# first's kernels.
TWO_LAYERS = """
func.func @main(%x: tensor<128x768xf32>, %wq: tensor<768x768xf32>, %wk: tensor<768x768xf32>, %wv: tensor<768x768xf32>, %uq: tensor<768x768xf32>, %uk: tensor<768x768xf32>, %uv: tensor<768x768xf32>) -> tensor<128x768xf32> {
  %q = tensor.matmul %x, %wq : (tensor<128x768xf32>, tensor<768x768xf32>) -> tensor<128x768xf32>
  %k = tensor.matmul %x, %wk : (tensor<128x768xf32>, tensor<768x768xf32>) -> tensor<128x768xf32>
  %v = tensor.matmul %x, %wv : (tensor<128x768xf32>, tensor<768x768xf32>) -> tensor<128x768xf32>
  %s = tensor.add %q, %k : (tensor<128x768xf32>, tensor<128x768xf32>) -> tensor<128x768xf32>
  %h = tensor.add %s, %v : (tensor<128x768xf32>, tensor<128x768xf32>) -> tensor<128x768xf32>
  %q2 = tensor.matmul %h, %uq : (tensor<128x768xf32>, tensor<768x768xf32>) -> tensor<128x768xf32>
  %k2 = tensor.matmul %h, %uk : (tensor<128x768xf32>, tensor<768x768xf32>) -> tensor<128x768xf32>
  %v2 = tensor.matmul %h, %uv : (tensor<128x768xf32>, tensor<768x768xf32>) -> tensor<128x768xf32>
  %s2 = tensor.add %q2, %k2 : (tensor<128x768xf32>, tensor<128x768xf32>) -> tensor<128x768xf32>
  %y = tensor.add %s2, %v2 : (tensor<128x768xf32>, tensor<128x768xf32>) -> tensor<128x768xf32>
  func.return %y : tensor<128x768xf32>
}
"""
PIECE_FLOPS = 2 * 128 * 768 * 768
PIECE_BYTES = 4 * (128 * 768 + 768 * 768 + 128 * 768)  # x and one weight in, one result out


def profiled(text: str, name: str = "t.ir", measurer=None, repeat: int = 2):
    module = parse_module(text, name)
    entry = module.functions()[0].sym_name
    run = profile.run_profile(module, entry, measurer or measurers.measurer_for("cpu"), repeat=repeat, warmup=1)
    return profile.profile_data(run)


def check_ceilings(kernels: list[dict], hw, cores: int | None = None) -> None:
    """No kernel above the ceilings of the `cores` the run used (all of
    them by default): per core, the machine's over its cores."""
    share = (cores or hw.sm_count) / hw.sm_count
    flops_ceiling, bandwidth_ceiling = hw.flops_ceiling * share, hw.bandwidth_ceiling * share
    for k in kernels:
        assert k["seconds"] > 0, k["name"]
        assert (k["gflop_per_second"] or 0) * 1e9 <= flops_ceiling, f"{k['name']}: {k['gflop_per_second']:.1f} GFLOP/s is above the {flops_ceiling / 1e9:.0f} of {cores or hw.sm_count} core(s)"
        assert k["gb_per_second"] * 1e9 <= bandwidth_ceiling, f"{k['name']}: {k['gb_per_second']:.1f} GB/s is above the {bandwidth_ceiling / 1e9:.0f} of {cores or hw.sm_count} core(s)"
        if "_pack_" in k["name"]:
            assert k["flops"] == 0 and k["bytes_read"] > 0


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.ir")))
def test_every_kernel_of_the_examples_is_below_the_machines_ceilings(example):
    """A physical bound, not a timing threshold: no kernel computes faster
    than the FMA units of the one core it ran on issue, nor moves its bytes
    faster than that core's L1 delivers (passes/backends/hardware.py's
    ceilings, per core). Short kernels are repeated until each has 1 ms of
    timed runs (profile.MIN_KERNEL_SECONDS)."""
    data = profiled((EXAMPLES / example).read_text(), example, measurer=measurers.measurer_for("cpu", 1))
    assert data["agrees"], data["max_error"]
    assert data["kernels"]
    check_ceilings(data["kernels"], hardware("cpu"), cores=1)


def test_each_launch_of_a_horizontal_group_is_credited_its_own_piece():
    """Merged Q/K/V: one kernel launched once per matmul. Each launch did one
    matmul (crediting each with all three gave 450-500 GFLOP/s on one core,
    above its 256 GFLOP/s of FMA units)."""
    data = profiled(QKV, measurer=measurers.measurer_for("cpu", 1))
    assert data["agrees"], data["max_error"]
    launches = data["kernels"]
    assert len(launches) == 3 and len({k["name"] for k in launches}) == 1 and {k["group"] for k in launches} == {0}, launches
    assert [k["flops"] for k in launches] == [PIECE_FLOPS] * 3
    assert [k["bytes"] for k in launches] == [PIECE_BYTES] * 3
    check_ceilings(launches, hardware("cpu"), cores=1)


def test_report_measure_credits_each_piece_to_its_launch():
    data = measure.measure(parse_module(QKV, "t.ir"), "main", "cpu", repeat=3, threads=1)
    fused = data["measured"]["fused"]["kernels"]
    assert [k["flops"] for k in fused] == [PIECE_FLOPS] * 3
    assert [k["bytes_read"] + k["bytes_written"] for k in fused] == [PIECE_BYTES] * 3
    check_ceilings(fused, hardware("cpu"), cores=1)
    check_ceilings(data["measured"]["unfused"]["kernels"], hardware("cpu"), cores=1)


def test_identical_layers_credit_each_launch_to_its_own_layer():
    """The second layer runs the first layer's kernels (lower-to-loops and
    share-kernels share identical kernels); its launches still compute, and
    are credited to, the second layer's groups."""
    module = parse_module(TWO_LAYERS, "t.ir")
    variant = measured_variants.compile_variant(module, "main", measurers.measurer_for("cpu", 1), True, DiagnosticEngine())
    groups = {g["id"]: g for g in variant.model["groups"]}
    credited = {gid: sum(s.flops for s in variant.steps if s.group == gid) for gid in groups}
    assert credited == {gid: g["flops"] for gid, g in groups.items()}
    matmuls = [s for s in variant.steps if s.executed_flops >= PIECE_FLOPS]
    assert len(matmuls) == 6 and len({s.name for s in matmuls}) < 6, [s.name for s in matmuls]  # kernels are shared
    assert {n for s in matmuls[3:] for n in groups[s.group]["names"]} == {"%q2", "%k2", "%v2", "%s2", "%y"}
    pieces = [s for s in matmuls if groups[s.group]["kind"] == "horizontal"]
    assert len(pieces) == 4 and all(s.flops == PIECE_FLOPS for s in pieces)  # one matmul each


def test_short_kernels_are_repeated_until_they_can_be_timed():
    module = parse_module(FORBID, "t.ir")
    measurer = measurers.measurer_for("cpu")
    variant = measured_variants.compile_variant(module, "main", measurer, True, None or __import__("fusecc.compiler.diagnostics", fromlist=["x"]).DiagnosticEngine())
    inputs = measured_call.model_inputs(module.lookup("main"), 0)
    rounds = profile.time_steps(variant, inputs, "main", warmup=0, repeat=2, min_kernel_seconds=0.02)
    assert rounds > 2
    assert all(len(s.seconds) == rounds for s in variant.steps)
    assert all(sum(s.seconds) >= 0.02 for s in variant.steps) or rounds == profile.MAX_ROUNDS


def test_forbidden_fusion_is_an_unfused_pattern_with_its_remedy():
    data = profiled(FORBID)
    assert [(p["producer"], p["consumer"]) for p in data["unfused_patterns"]][:2] != []
    pairs = {(p["producer_group"], p["consumer_group"]): p for p in data["unfused_patterns"]}
    assert set(pairs) == {(0, 1), (1, 2)}
    for p in pairs.values():
        assert p["bytes_saved"] == 2 * 256 * 1024 * 4  # written once and read once
        assert "fusion.forbid" in p["reason"]
        assert p["force"].startswith("remove {fusion.forbid = true} from %b at t.ir:4:3")
    saved = [p["seconds_saved"] for p in data["unfused_patterns"]]
    assert saved == sorted(saved, reverse=True)


def test_cost_model_refusal_gives_its_words_and_fusion_force():
    data = profiled(RECOMPUTE)
    (pattern,) = data["unfused_patterns"]
    assert pattern["reason"].startswith("not profitable: est.")
    assert pattern["force"] == "add {fusion.force = true} to %8 (tensor.add) at t.ir:11:3"
    assert pattern["bytes_saved"] == 2 * 1024 * 4


def test_kernels_name_their_source_ops_with_locations():
    data = profiled(FORBID)
    assert [k["locations"] for k in data["kernels"]] == [["t.ir:3:3"], ["t.ir:4:3"], ["t.ir:5:3"]]
    text = profile.format_profile(data)
    assert "source ops (line:col of t.ir)" in text and "%b add (4:3)" in text and "unfused patterns" in text


def test_trace_has_one_slice_per_kernel_with_its_figures():
    data = profiled(FORBID)
    trace = profile.chrome_trace(data)
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in slices] == [k["name"] for k in data["kernels"]]
    assert all(e["dur"] > 0 and e["args"]["bytes"] > 0 for e in slices)
    assert all(b["ts"] >= a["ts"] + a["dur"] for a, b in zip(slices, slices[1:]))


def test_cuda_sim_times_each_launch_of_the_gpu_code():
    pytest.importorskip("fusecc.runtime.cuda.cpu_harness")
    measurer = gpu_measure.measurer_for("cuda-sim", "h200")
    data = profiled(FORBID.replace("256x1024", "8x64"), measurer=measurer, repeat=1)
    assert data["agrees"]
    assert [k["name"] for k in data["kernels"]] == ["fused_0_elementwise", "fused_1_elementwise", "fused_2_elementwise"]
    assert all(k["seconds"] > 0 for k in data["kernels"])


@pytest.mark.cuda
def test_cuda_events_time_each_launch_on_the_gpu():
    from fusecc.runtime.cuda.runtime import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(reason)
    data = profiled((EXAMPLES / "mlp.ir").read_text(), "mlp.ir", measurer=gpu_measure.measurer_for("cuda", "h200"))
    assert data["agrees"]
    check_ceilings(data["kernels"], hardware("h200"))


def test_an_unknown_profile_target_is_refused():
    with pytest.raises(measurers.MeasurementUnavailable):
        gpu_measure.measurer_for("reference", None)
