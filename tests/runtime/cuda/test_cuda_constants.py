"""Weights are not baked into kernels.cu: a model's large constants are
device buffers listed in kernels.json and written to kernels.safetensors,
uploaded once per program load and passed to kernels as arguments. So a
kernel shared by identical layers (share-kernels, lower-to-loops) reads each
layer's own weights, the source stays small, and the exact CUDA C runs on
the CPU harness like the reference. Small constants (up to
buffer_facts.BAKE_LIMIT_BYTES) stay in the source when every launch of the
kernel passes the same one."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import numpy as np
import pytest

from fusecc.compiler.parser import parse_module
from fusecc.compiler.resources import ResourceFile
from fusecc.compiler.types import TensorType, f32
from fusecc.passes.backends.cuda.manifest import Manifest
from fusecc.passes.lowering.buffer_facts import BAKE_LIMIT_BYTES
from fusecc.runtime.cuda.execute import run_on_cpu
from fusecc.runtime.reference import evaluate
from fusecc.tools.fusecc import main as fusecc_main

ROOT = pathlib.Path(__file__).resolve().parents[3]
# examples/encoder_block.ir made small enough for the CPU harness: sequence
# 32, hidden 128 (2 heads of 64), FFN 512. Its weights are 64-256 KiB each
# (device buffers), b1 2 KiB; the other biases and LayerNorm parameters 512 bytes.
SHRINK = (("128", "32"), ("768", "128"), ("3072", "512"), ("x12x", "x2x"))


def small_encoder(folder: pathlib.Path, layers: int) -> tuple[pathlib.Path, dict[str, np.ndarray]]:
    spec = importlib.util.spec_from_file_location("encoder_layers", ROOT / "benchmarks" / "encoder_layers.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    text = (ROOT / "examples" / "encoder_block.ir").read_text()
    for old, new in SHRINK:
        text = text.replace(old, new)
    make.BLOCK = folder / "encoder_block_small.ir"
    make.BLOCK.write_text(text)
    path = folder / f"encoder{layers}.ir"
    weights = make.write_encoder(layers, path, resources=True)
    return path, weights


# float_literal's spellings (passes/backends/cuda/c_text.py): 0.0125f, 1e-05f, (-3.5f)
FLOAT_LITERAL = re.compile(r"(?<![\w.])(\d+\.\d*(?:e[-+]?\d+)?|\d+e[-+]?\d+)f\b")


def compile_to_cuda(path: pathlib.Path, out: pathlib.Path) -> tuple[str, Manifest]:
    assert fusecc_main([str(path), "-o", str(out)]) == 0
    return out.read_text(), Manifest.from_json(out.with_suffix(".json").read_text())


def defined_kernels(source: str) -> list[str]:
    return re.findall(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', source)


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    folder = tmp_path_factory.mktemp("encoders")
    built = {}
    for layers in (1, 2):
        path, weights = small_encoder(folder, layers)
        source, manifest = compile_to_cuda(path, folder / f"kernels{layers}.cu")
        built[layers] = (path, weights, source, manifest, folder)
    return built


def test_two_layers_define_each_kernel_once_and_pass_each_layers_weights(encoders):
    _, weights, source, manifest, folder = encoders[2]
    _, _, source_one, manifest_one, _ = encoders[1]
    defined = defined_kernels(source)
    assert len(defined) == len(set(defined))
    assert defined == defined_kernels(source_one)  # the second layer adds no kernel
    assert len(manifest.launches) == 2 * len(manifest_one.launches)
    # Every weight above the limit is a constant of the manifest, once, with its values in the file it names.
    large = {name: w for name, w in weights.items() if w.nbytes > BAKE_LIMIT_BYTES}
    assert len(large) == 2 * 7 and len(manifest.constants) >= len(large)
    stored = ResourceFile(folder / manifest.constants[0].file)
    held = [stored.array(c.tensor, TensorType(c.shape, f32)) for c in manifest.constants]
    for name, w in large.items():
        assert sum(h.shape == w.shape and np.array_equal(h, w) for h in held) == 1, name
    # A shared kernel's launches pass the two layers' different weights.
    by_kernel: dict[str, set] = {}
    for launch in manifest.launches:
        for i, arg in enumerate(launch.args):
            if type(arg).__name__ == "ConstantArg":
                by_kernel.setdefault((launch.kernel, i), set()).add(arg.name)
    assert any(len(names) == 2 for names in by_kernel.values())
    # The source holds no weights: no initialised array above the bake limit, and no value of a large
    # weight as a literal (random normals: a kernel's own constants, such as 1e-05f or 0.125f, are not among them).
    arrays = re.findall(r"static __device__ const [\w ]+? \w+\[(\d+)\]", source)
    assert all(int(n) * 4 <= BAKE_LIMIT_BYTES for n in arrays), arrays
    literals = {float(np.float32(x)) for x in FLOAT_LITERAL.findall(source)}
    assert literals, "no float literal found: FLOAT_LITERAL no longer matches float_literal's spelling"
    weight_values = set(np.concatenate([w.reshape(-1) for w in large.values()]).astype(np.float64).tolist())
    assert not literals & weight_values
    # Kernels only: baked as text the weights would take about 3 characters per byte, the kernels take a
    # fraction of one. A second layer does not grow the source (one layer bakes its 512-byte biases;
    # two layers pass each layer's as arguments instead).
    assert len(source) < sum(w.nbytes for w in large.values()) / 4
    assert len(source) <= len(source_one)


def test_the_cuda_c_runs_on_the_cpu_harness_like_the_reference(encoders, cuda_cache_dir):
    path, _, source, manifest, folder = encoders[2]
    module = parse_module(path.read_text(), filename=str(path))
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 32, 128)).astype(np.float32)
    mask = np.where(rng.random((1, 1, 1, 32)) < 0.2, -10000.0, 0.0).astype(np.float32)
    (want,) = evaluate(module, "encoder", [x, mask])
    got = run_on_cpu(manifest, source, [x, mask], cache_dir=cuda_cache_dir, folder=folder)["result0"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


KERNEL = """
loop.kernel @scale_by_table {group = 8, kind = "elementwise"} {
^bb0(%x: memref<64xf32>, %table: memref<4xf32>, %y: memref<64xf32>):
  loop.parallel {upper = [1], mapping = ["block.x"]} {
  ^bb0(%b: index):
    loop.parallel {upper = [64], mapping = ["thread.x"]} {
    ^bb0(%t: index):
      %c4 = arith.constant {value = 4 : index} : () -> index
      %k = arith.rem %t, %c4 : (index, index) -> index
      %v = loop.load %x, %t : (memref<64xf32>, index) -> f32
      %w = loop.load %table, %k : (memref<4xf32>, index) -> f32
      %p = arith.mul %v, %w : (f32, f32) -> f32
      loop.store %p, %y, %t : f32, memref<64xf32>, index
      loop.yield
    }
    loop.yield
  }
  loop.return
}
"""


def schedule(launches: str) -> str:
    return KERNEL + f"""
loop.schedule @main {{arena_size = 0, inputs = ["x"], outputs = ["result0", "result1"]}} {{
^bb0(%x: memref<64xf32>, %result0: memref<64xf32>, %result1: memref<64xf32>):
  %up = loop.constant {{value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>}} : () -> memref<4xf32>
  %down = loop.constant {{value = dense<[-4.0, -3.0, -2.0, -1.0]> : tensor<4xf32>}} : () -> memref<4xf32>
{launches}
  loop.return
}}
"""


@pytest.mark.parametrize("second", ["up", "down"])
def test_a_small_constant_is_baked_only_when_every_launch_passes_it(second, tmp_path, cuda_cache_dir):
    """One kernel launched twice: with the same 16-byte table it is baked
    into the source; with two different tables (a kernel shared by two
    layers) both are arguments, and each launch reads its own."""
    from fusecc.driver.cuda_level import build_manifest
    from fusecc.passes.backends.cuda.emit import emit_cuda

    launches = f"""  loop.launch @scale_by_table(%x, %up, %result0) : memref<64xf32>, memref<4xf32>, memref<64xf32>
  loop.launch @scale_by_table(%x, %{second}, %result1) : memref<64xf32>, memref<4xf32>, memref<64xf32>"""
    module = parse_module(schedule(launches))
    cuda = emit_cuda(module)
    manifest = build_manifest(module, cuda)
    baked = second == "up"
    assert ("static __device__ const float up[4]" in cuda.text) == baked
    assert "down[4]" not in cuda.text
    assert [c.name for c in manifest.constants] == ([] if baked else ["up", "down"])
    assert len(manifest.launches[0].args) == (2 if baked else 3)
    x = np.arange(64, dtype=np.float32)
    out = run_on_cpu(Manifest.from_json(manifest.to_json()) if baked else manifest, cuda.text, [x], cache_dir=cuda_cache_dir)
    tables = {"up": np.array([1, 2, 3, 4], np.float32), "down": np.array([-4, -3, -2, -1], np.float32)}
    np.testing.assert_array_equal(out["result0"], x * np.tile(tables["up"], 16))
    np.testing.assert_array_equal(out["result1"], x * np.tile(tables[second], 16))


def test_narrow_float_and_index_constants_cross_the_file_bit_for_bit(tmp_path, cuda_cache_dir):
    """bf16 (kept as its 16-bit pattern), f16 and i64 constants written to
    kernels.safetensors and read back by the harness give the reference's bits."""
    from fusecc.compiler.types import round_to_bf16

    rng = np.random.default_rng(6)

    def dense(values) -> str:
        return "[" + ", ".join(repr(v.item()) for v in values) + "]"

    scale, shift, rows = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(np.float16), rng.integers(0, 1024, 600)
    text = f"""func.func @main(%x: tensor<1024xbf16>, %y: tensor<1024xf16>, %t: tensor<1024x4xf32>) -> (tensor<1024xbf16>, tensor<1024xf16>, tensor<600x4xf32>) {{
  %scale = tensor.constant {{value = dense<{dense(scale)}> : tensor<1024xbf16>}} : () -> tensor<1024xbf16>
  %shift = tensor.constant {{value = dense<{dense(shift)}> : tensor<1024xf16>}} : () -> tensor<1024xf16>
  %rows = tensor.constant {{value = dense<{dense(rows)}> : tensor<600xi64>}} : () -> tensor<600xi64>
  %0 = tensor.mul %x, %scale : (tensor<1024xbf16>, tensor<1024xbf16>) -> tensor<1024xbf16>
  %1 = tensor.add %y, %shift : (tensor<1024xf16>, tensor<1024xf16>) -> tensor<1024xf16>
  %2 = tensor.gather %t, %rows {{axis = 0}} : (tensor<1024x4xf32>, tensor<600xi64>) -> tensor<600x4xf32>
  func.return %0, %1, %2 : tensor<1024xbf16>, tensor<1024xf16>, tensor<600x4xf32>
}}
"""
    (tmp_path / "narrow.ir").write_text(text)
    source, manifest = compile_to_cuda(tmp_path / "narrow.ir", tmp_path / "narrow.cu")
    assert sorted(c.dtype for c in manifest.constants) == ["bf16", "f16", "i64"]
    inputs = [round_to_bf16(rng.standard_normal(1024).astype(np.float32)), rng.standard_normal(1024).astype(np.float16), rng.standard_normal((1024, 4)).astype(np.float32)]
    want = evaluate(parse_module(text), "main", inputs)
    got = run_on_cpu(manifest, source, inputs, cache_dir=cuda_cache_dir, folder=tmp_path)
    for expected, value in zip(want, got.values(), strict=True):
        assert value.dtype == np.asarray(expected).dtype and np.array_equal(value, expected)
