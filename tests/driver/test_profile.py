"""driver/profile.py: per-kernel figures that respect physics, unfused
patterns with the fuser's reasons, the trace, and the GPU timing paths."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from fusecc.compiler.parser import parse_module
from fusecc.driver import gpu_measure, measured_call, measured_variants, measurers, profile
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


def profiled(text: str, name: str = "t.ir", measurer=None, repeat: int = 2):
    module = parse_module(text, name)
    entry = module.functions()[0].sym_name
    run = profile.run_profile(module, entry, measurer or measurers.measurer_for("cpu"), repeat=repeat, warmup=1)
    return profile.profile_data(run)


def check_ceilings(data: dict, hw) -> None:
    for k in data["kernels"]:
        assert k["seconds"] > 0, k["name"]
        assert k["gflop_per_second"] * 1e9 <= hw.flops_ceiling, f"{k['name']}: {k['gflop_per_second']:.1f} GFLOP/s is above the machine's {hw.flops_ceiling / 1e9:.0f}"
        assert k["gb_per_second"] * 1e9 <= hw.bandwidth_ceiling, f"{k['name']}: {k['gb_per_second']:.1f} GB/s is above the machine's {hw.bandwidth_ceiling / 1e9:.0f}"
        if "_pack_" in k["name"]:
            assert k["flops"] == 0 and k["bytes"] > 0


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.ir")))
def test_every_kernel_of_the_examples_is_below_the_machines_ceilings(example):
    """A physical bound, not a timing threshold: no kernel computes faster
    than the FMA units issue, nor moves its bytes faster than L1 delivers
    (passes/backends/hardware.py's ceilings). Short kernels are repeated
    until each has 1 ms of timed runs (profile.MIN_KERNEL_SECONDS)."""
    data = profiled((EXAMPLES / example).read_text(), example)
    assert data["agrees"], data["max_error"]
    assert data["kernels"]
    check_ceilings(data, hardware("cpu"))


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
    check_ceilings(data, hardware("h200"))


def test_an_unknown_profile_target_is_refused():
    with pytest.raises(measurers.MeasurementUnavailable):
        gpu_measure.measurer_for("reference", None)
