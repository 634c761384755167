"""paraphrase-MiniLM-L3-v2 to CUDA C: `fusecc model.onnx -o kernels.cu`
writes a small source (the weights are not baked into it), kernels.json and
kernels.safetensors with the weights, which the runtime uploads once. The
three identical layers share their kernels, and each launch passes its own
layer's weights (before the fix: ConflictingConstants, exit 2). The exact
CUDA C, run on the CPU harness from the files it was written to, agrees
with onnxruntime."""

from __future__ import annotations

import re

import numpy as np
import onnxruntime

from fusecc.compiler.resources import ResourceFile
from fusecc.compiler.types import SCALAR_TYPES, TensorType
from fusecc.passes.backends.cuda.manifest import ConstantArg, Manifest
from fusecc.runtime.cuda.execute import run_on_cpu
from fusecc.tools.fusecc import main as fusecc_main

from test_minilm import LAYERS, SEQUENCE, inputs, model_path

# The model's weights are 68 MB; the source of all its kernels is ~80 KB.
SOURCE_LIMIT = 1_000_000


def test_minilm_compiles_to_small_cuda_c_with_its_weights_beside(tmp_path):
    out = tmp_path / "kernels.cu"
    assert fusecc_main([model_path(), "--shape", f"input_ids=1x{SEQUENCE}", "-o", str(out)]) == 0
    source = out.read_text()
    manifest = Manifest.from_json((tmp_path / "kernels.json").read_text())
    weights = tmp_path / "kernels.safetensors"
    constant_bytes = sum(c.nbytes for c in manifest.constants)
    assert constant_bytes > 60_000_000 and weights.stat().st_size >= constant_bytes
    assert len(source.encode()) < SOURCE_LIMIT and len(source.encode()) < constant_bytes / 100

    defined = re.findall(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', source)
    assert len(defined) == len(set(defined))
    launched = [launch.kernel for launch in manifest.launches]
    assert set(launched) <= set(defined)
    # Each layer's kernels are launched once per layer, with that layer's weights.
    per_layer = [name for name in set(launched) if launched.count(name) == LAYERS]
    assert per_layer
    for name in per_layer:
        passed = [tuple(a.name for a in launch.args if isinstance(a, ConstantArg)) for launch in manifest.launches if launch.kernel == name]
        if passed[0]:
            assert len(set(passed)) == LAYERS, name

    # The file holds what the manifest says, readable as the manifest's types.
    stored = ResourceFile(weights)
    for constant in manifest.constants:
        array = stored.array(constant.tensor, TensorType(constant.shape, SCALAR_TYPES[constant.dtype]))
        assert array.shape == constant.shape
        assert array.dtype.kind != "f" or np.isfinite(array).all(), constant.name

    # The files alone run: the CPU harness uploads the constants from kernels.safetensors.
    feeds = inputs(1, [SEQUENCE - 28])
    got = run_on_cpu(manifest, source, feeds, cache_dir=tmp_path / "cache", folder=tmp_path)
    expected = onnxruntime.InferenceSession(model_path(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, e in zip(got.values(), expected, strict=True):
        assert g.shape == e.shape
        scale = float(np.max(np.abs(e)))
        assert float(np.max(np.abs(g.astype(np.float64) - e))) <= 1e-4 * scale
