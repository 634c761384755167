"""kernels.json round-trips, rejects malformed documents with the field's
path, and runs a (manifest, source, inputs) triple on the CPU harness."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from fusecc.runtime.cuda.execute import ExecutionError, plan_memory, run_on_cpu
from fusecc.compiler.resources import write_safetensors
from fusecc.compiler.types import f32
from fusecc.passes.backends.cuda.manifest import ArenaArg, ConstantArg, ConstantSpec, Launch, Manifest, ManifestError, ScalarArg, TensorArg, TensorSpec
from fusecc.runtime.reference import round_bf16

ROWS, COLS = 6, 50


def gelu_then_axpby() -> Manifest:
    """t = gelu(x + bias) into the arena; out = 2*t - x."""
    n = ROWS * COLS
    return Manifest(
        source="elementwise.cu",
        inputs=(TensorSpec("x", (ROWS, COLS), "f32"), TensorSpec("bias", (COLS,), "f32")),
        outputs=(TensorSpec("result0", (ROWS, COLS), "f32"),),
        arena_bytes=4 * n + 64,
        launches=(
            Launch(
                "bias_gelu_2d",
                grid=(math.ceil(COLS / 16), math.ceil(ROWS / 16)),
                block=(16, 16),
                args=(TensorArg("input", "x"), TensorArg("input", "bias"), ArenaArg(64, (ROWS, COLS), "f32"), ScalarArg(ROWS, "i32"), ScalarArg(COLS, "i32")),
            ),
            Launch(
                "axpby",
                grid=(2,),
                block=(128,),
                args=(ArenaArg(64, (n,), "f32"), TensorArg("input", "x"), TensorArg("output", "result0"), ScalarArg(2.0, "f32"), ScalarArg(-1.0, "f32"), ScalarArg(n, "i32")),
            ),
        ),
    )


def test_round_trip_and_documented_shape():
    manifest = gelu_then_axpby()
    text = manifest.to_json()
    assert Manifest.from_json(text) == manifest
    document = json.loads(text)
    assert document["version"] == 1 and document["arena_bytes"] == 4 * ROWS * COLS + 64
    assert document["launches"][0]["grid"] == [4, 1, 1] and document["launches"][0]["shared_bytes"] == 0
    assert document["launches"][1]["args"][:3] == [{"arena": 64, "shape": [ROWS * COLS], "dtype": "f32"}, {"input": "x"}, {"output": "result0"}]
    assert document["launches"][1]["args"][3] == {"scalar": 2.0, "dtype": "f32"}
    assert manifest.kernel_names == ["bias_gelu_2d", "axpby"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.pop("source"), r"kernels.json: missing 'source'"),
        (lambda d: d.update(version=4), r"version: this fusecc reads versions 1, 2, 3, not 4"),
        (lambda d: d["launches"][0].update(grid=["4"]), r"sizes are expressions of dims: need version 3, the document says 1"),
        (lambda d: d["inputs"][0].update(dtype="f8"), r"tensor 'x': unknown dtype 'f8'"),
        (lambda d: d["launches"][0]["args"][0].update(input="y"), r"launches\[0\] \(bias_gelu_2d\).args\[0\]: no input named 'y'"),
        (lambda d: d["launches"][1]["args"][0].update(arena=128), r"launches\[1\] \(axpby\).args\[0\]: bytes \[128, 1328\) lie outside the arena of 1264"),
        (lambda d: d["launches"][1]["args"][0].update(arena=2), r"offset 2 is not aligned for f32"),
        (lambda d: d["launches"][1]["args"][1].update(output="result0"), r"launches\[1\].args\[1\]: an argument has exactly one of"),
        (lambda d: d["launches"][0].update(block=[64, 32]), r"a block of 2048 threads exceeds 1024"),
        (lambda d: d["launches"][0].update(grid=[4.5]), r"launches\[0\].grid: expected a list of integers or size expressions"),
    ],
)
def test_malformed_manifests_name_the_field(edit, message):
    document = gelu_then_axpby().to_dict()
    edit(document)
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(json.dumps(document))


def test_memory_plan_is_one_aligned_allocation():
    plan = plan_memory(gelu_then_axpby())
    assert plan.offsets == {"x": 1280, "bias": 2560, "result0": 2816}
    assert plan.total_bytes == 4096


def test_cpu_harness_runs_the_triple(cuda_source, cuda_cache_dir):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    bias = rng.standard_normal(COLS).astype(np.float32)
    outputs = run_on_cpu(gelu_then_axpby(), cuda_source("elementwise.cu"), {"x": x, "bias": bias}, cache_dir=cuda_cache_dir)
    v = x.astype(np.float64) + bias
    gelu = 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))
    assert list(outputs) == ["result0"]
    np.testing.assert_allclose(outputs["result0"], 2 * gelu - x, rtol=1e-5, atol=1e-6)

    with pytest.raises(ExecutionError, match=r"input 'bias' has shape \[3\], expected \[50\]"):
        run_on_cpu(gelu_then_axpby(), cuda_source("elementwise.cu"), [x, bias[:3]], cache_dir=cuda_cache_dir)


def test_bf16_and_f16_cross_the_host_device_boundary(cuda_source, cuda_cache_dir):
    n = 300
    manifest = Manifest(
        source="half_precision.cu",
        inputs=(TensorSpec("x", (n,), "bf16"),),
        outputs=(TensorSpec("y", (n,), "f16"),),
        launches=(Launch("bf16_plus_one_to_f16", (3,), (128,), (TensorArg("input", "x"), TensorArg("output", "y"), ScalarArg(n, "i32"))),),
    )
    x = round_bf16(np.random.default_rng(2).standard_normal(n).astype(np.float32))  # bf16 values, held as float32
    y = run_on_cpu(manifest, cuda_source("half_precision.cu"), [x], cache_dir=cuda_cache_dir)["y"]
    assert y.dtype == np.float16 and np.array_equal(y, (x + np.float32(1)).astype(np.float16))


def test_the_documented_example_is_this_program():
    doc = (Path(__file__).resolve().parents[3] / "docs" / "cuda-manifest.md").read_text()
    example = re.search(r"```json\n(.*?)```", doc, re.S).group(1)
    assert Manifest.from_json(example) == dataclasses.replace(gelu_then_axpby(), source="kernels.cu", arch="sm_90")


def scaled_by_weights(weights: np.ndarray | None = None) -> Manifest:
    """out = 3*w - x, with w a constant the runtime uploads from weights.safetensors."""
    n = ROWS * COLS
    return Manifest(
        source="elementwise.cu",
        inputs=(TensorSpec("x", (n,), "f32"),),
        outputs=(TensorSpec("result0", (n,), "f32"),),
        constants=(ConstantSpec("w", (n,), "f32", "weights.safetensors", "layer0.w", weights),),
        launches=(Launch("axpby", (2,), (128,), (ConstantArg("w"), TensorArg("input", "x"), TensorArg("output", "result0"), ScalarArg(3.0, "f32"), ScalarArg(-1.0, "f32"), ScalarArg(n, "i32"))),),
    )


def test_constants_round_trip_as_version_2():
    manifest = scaled_by_weights()
    document = json.loads(manifest.to_json())
    assert document["version"] == 2 and "constants" not in gelu_then_axpby().to_dict()
    assert document["constants"] == [{"name": "w", "shape": [ROWS * COLS], "dtype": "f32", "file": "weights.safetensors", "tensor": "layer0.w"}]
    assert document["launches"][0]["args"][0] == {"constant": "w"}
    assert Manifest.from_json(manifest.to_json()) == manifest
    plan = plan_memory(manifest)  # constants follow the outputs in the one allocation, 256-byte aligned
    assert (plan.offsets, plan.constant_offsets, plan.total_bytes) == ({"x": 0, "result0": 1280}, {"w": 2560}, 3840)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["launches"][0]["args"][0].update(constant="v"), r"launches\[0\] \(axpby\).args\[0\]: no constant named 'v'"),
        (lambda d: d["constants"][0].update(file="/etc/weights.safetensors"), r"constants\[0\] \('w'\).file: '/etc/weights.safetensors' must name a file inside"),
        (lambda d: d["constants"][0].update(file="../weights.safetensors"), r"must name a file inside the manifest's folder"),
        (lambda d: d["constants"][0].pop("tensor"), r"constants\[0\]: missing 'tensor'"),
        (lambda d: d["constants"][0].update(dtype="f8"), r"constants\[0\] \('w'\): unknown dtype 'f8'"),
        (lambda d: d.update(version=1), r"constants: need version 2"),
        (lambda d: d["constants"].append(dict(d["constants"][0])), r"constants: names must be unique"),
    ],
)
def test_malformed_constants_name_the_field(edit, message):
    document = scaled_by_weights().to_dict()
    edit(document)
    with pytest.raises(ManifestError, match=message):
        Manifest.from_json(json.dumps(document))


def test_cpu_harness_reads_constants_from_the_file_beside_the_manifest(tmp_path, cuda_source, cuda_cache_dir):
    rng = np.random.default_rng(3)
    n = ROWS * COLS
    w, x = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    write_safetensors({"layer0.w": (w, f32)}, tmp_path / "weights.safetensors")
    manifest = Manifest.from_json(scaled_by_weights().to_json())  # no values in memory: they come from the file
    source = cuda_source("elementwise.cu")
    out = run_on_cpu(manifest, source, [x], cache_dir=cuda_cache_dir, folder=tmp_path)["result0"]
    np.testing.assert_allclose(out, 3 * w - x, rtol=1e-6)
    # Built in this process, the manifest carries the values themselves.
    np.testing.assert_allclose(run_on_cpu(scaled_by_weights(w), source, [x], cache_dir=cuda_cache_dir)["result0"], 3 * w - x, rtol=1e-6)

    with pytest.raises(ExecutionError, match=r"constant 'w' is read from 'weights.safetensors' beside the manifest: give the manifest's folder"):
        run_on_cpu(manifest, source, [x], cache_dir=cuda_cache_dir)
    with pytest.raises(ExecutionError, match=r"constant 'w': resource file .* does not exist"):
        run_on_cpu(manifest, source, [x], cache_dir=cuda_cache_dir, folder=tmp_path / "elsewhere")
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "weights.safetensors").symlink_to(tmp_path / "weights.safetensors")
    with pytest.raises(ExecutionError, match=r"symbolic link that leads outside"):
        run_on_cpu(manifest, source, [x], cache_dir=cuda_cache_dir, folder=tmp_path / "inner")
    (tmp_path / "short").mkdir()
    write_safetensors({"layer0.w": (w[:10], f32)}, tmp_path / "short" / "weights.safetensors")
    with pytest.raises(ExecutionError, match=r"constant 'w': resource 'layer0.w' has shape \[10\]"):
        run_on_cpu(manifest, source, [x], cache_dir=cuda_cache_dir, folder=tmp_path / "short")
