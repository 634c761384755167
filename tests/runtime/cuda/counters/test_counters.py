"""Offline counters (issue 13.2): bank-conflict ways and sector efficiency
from the address stream of kernels with known answers, occupancy and waves
from their formulas, and `fusecc report --counters` on an example."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fusecc.passes.backends.cuda.manifest import Launch, Manifest, TensorArg, TensorSpec
from fusecc.passes.backends.hardware import HARDWARE, occupancy, resident_blocks
from fusecc.runtime.cuda.counters import measure_access_streams
from fusecc.tools.fusecc import main as fusecc_main

SOURCE = r"""
extern "C" __global__ void patterns(const float* __restrict__ x, float* __restrict__ y, int stride, int bank_stride) {
  __shared__ float tile[32 * 33];
  const int t = threadIdx.x;
  tile[t * bank_stride] = x[t * stride];
  __syncthreads();
  y[t] = tile[t * bank_stride];
}
"""


def streams(stride: int, bank_stride: int, cache_dir):
    manifest = Manifest(
        source="patterns.cu",
        inputs=(TensorSpec("x", (32 * 8,), "f32"),),
        outputs=(TensorSpec("y", (32,), "f32"),),
        launches=(Launch("patterns", (1,), (32,), (TensorArg("input", "x"), TensorArg("output", "y"), _int(stride), _int(bank_stride))),),
    )
    return measure_access_streams(manifest, SOURCE, {"x": np.ones(256, np.float32)}, cache_dir=cache_dir)["patterns"]


def _int(value):
    from fusecc.passes.backends.cuda.manifest import ScalarArg

    return ScalarArg(value, "i32")


@pytest.mark.parametrize("bank_stride, ways", [(1, 1.0), (33, 1.0), (32, 32.0), (2, 2.0)])
def test_bank_conflict_ways(bank_stride, ways, cuda_cache_dir):
    counts = streams(1, bank_stride, cuda_cache_dir)
    assert counts.shared_requests == 2  # one store, one load, for the one warp
    assert counts.shared_wavefronts / counts.shared_ideal_wavefronts == ways


@pytest.mark.parametrize("stride, efficiency", [(1, 1.0), (2, 0.5), (8, 0.125)])
def test_global_sector_efficiency(stride, efficiency, cuda_cache_dir):
    counts = streams(stride, 1, cuda_cache_dir)
    assert counts.global_requests == 2  # the load of x, the store of y (the scalars are arguments, not memory)
    load_bytes, load_sectors = 32 * 4, 32 * 4 * stride if stride <= 8 else 32 * 32
    assert counts.global_requested_bytes == load_bytes + 128
    assert counts.global_sector_bytes == min(load_sectors, 32 * 32) + 128
    assert (load_bytes / min(load_sectors, 32 * 32)) == efficiency


def test_occupancy_and_waves_from_registers_shared_memory_and_threads():
    h200 = HARDWARE["h200"]
    assert resident_blocks(h200, 256, 24, 128) == 8  # threads limit: 2048 / 256
    assert occupancy(h200, 256, 24, 128, 1024) == (1.0, 1024 / (8 * 132))
    assert resident_blocks(h200, 128, 96, 66304) == 3  # shared memory: 228 KB / (64.75 + 1 KB)
    assert occupancy(h200, 128, 96, 66304, 64)[0] == 3 * 4 / 64
    assert resident_blocks(h200, 256, 255, 0) == 1  # registers: 65536 / (8 warps x 8192)


def test_report_counters_json(tmp_path, capsys):
    program = tmp_path / "layernorm.ir"
    program.write_text(
        "func.func @main(%x: tensor<64x768xf32>, %g: tensor<768xf32>, %b: tensor<768xf32>) -> tensor<64x768xf32> {\n"
        "  %y = tensor.layernorm %x, %g, %b {epsilon = 1.0e-05} : (tensor<64x768xf32>, tensor<768xf32>, tensor<768xf32>) -> tensor<64x768xf32>\n"
        "  func.return %y : tensor<64x768xf32>\n}\n"
    )
    assert fusecc_main(["report", str(program), "--counters", "--arch", "sm_90", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert {"name", "shared_bank_conflict_ways", "global_sector_efficiency", "theoretical_occupancy", "waves", "registers", "spills"} <= set(row)
    assert row["name"].startswith("fused_") and row["grid_blocks"] >= 1
    assert 0 < row["global_sector_efficiency"] <= 1 and 0 < row["theoretical_occupancy"] <= 1


def test_report_counters_needs_a_cuda_target(tmp_path, capsys):
    program = tmp_path / "t.ir"
    program.write_text("func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = tensor.exp %x : (tensor<4xf32>) -> tensor<4xf32>\n  func.return %0 : tensor<4xf32>\n}\n")
    assert fusecc_main(["report", str(program), "--counters", "--target", "cpu"]) == 1
    assert "--counters measures CUDA kernels" in capsys.readouterr().err
