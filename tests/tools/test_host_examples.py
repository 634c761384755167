"""Issue 14.6: fusecc's output used elsewhere. kernels.cu on standard output
says that no manifest was written; the manifest carries the launch
requirements (shared-memory opt-in, compile options); examples/host/launch.py
runs a generated (kernels.cu, kernels.json) pair through a driver object, here
a fake one backed by the CPU harness, so everything but the cuda-bindings
calls runs without a GPU; examples/host/launch.cpp compiles against the real
CUDA headers."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from fusecc.compiler.parser import parse_module
from fusecc.passes.backends.cuda.manifest import DEFAULT_DYNAMIC_SHARED_LIMIT, Manifest, ManifestError
from fusecc.runtime.cuda import execute
from fusecc.runtime.cuda.cpu_harness import CpuModule
from fusecc.runtime.cuda.cpu_harness.loader import _POINTEE_DTYPES, POINTER
from fusecc.runtime.reference import evaluate
from fusecc.tools import fusecc as driver

ROOT = pathlib.Path(__file__).resolve().parents[2]
HOST = ROOT / "examples" / "host"

SMALL = """\
func.func @main(%x: tensor<4x32xf32>, %w: tensor<32x16xf32>, %b: tensor<16xbf16>) -> tensor<4x16xf32> {
  %0 = tensor.matmul %x, %w : (tensor<4x32xf32>, tensor<32x16xf32>) -> tensor<4x16xf32>
  %c = tensor.cast %b : (tensor<16xbf16>) -> tensor<16xf32>
  %1 = tensor.add %0, %c : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %2 = tensor.softmax %1 {axis = 1} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  func.return %2 : tensor<4x16xf32>
}
"""
# One attention head wide enough that its flash-attention kernel needs more
# than 48 KiB of dynamic shared memory on an H200.
ATTENTION = """\
func.func @main(%q: tensor<1x1x128x64xf32>, %k: tensor<1x1x128x64xf32>, %v: tensor<1x1x128x64xf32>) -> tensor<1x1x128x64xf32> {
  %0 = tensor.attention %q, %k, %v {scale = 0.125} : (tensor<1x1x128x64xf32>, tensor<1x1x128x64xf32>, tensor<1x1x128x64xf32>) -> tensor<1x1x128x64xf32>
  func.return %0 : tensor<1x1x128x64xf32>
}
"""


def load_host_module():
    spec = importlib.util.spec_from_file_location("fusecc_example_launch", HOST / "launch.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def compiled(tmp_path, text: str, name: str) -> tuple[pathlib.Path, dict]:
    program = tmp_path / f"{name}.ir"
    program.write_text(text)
    assert driver.main([str(program), "-o", str(tmp_path / f"{name}.cu")]) == 0
    return tmp_path / f"{name}.cu", json.loads((tmp_path / f"{name}.json").read_text())


class HarnessDriver:
    """launch.py's driver interface over host memory and the CPU harness:
    pointers are real host addresses into one numpy buffer."""

    def __init__(self):
        self.calls, self.buffers = [], {}

    def compile(self, source, name, options):
        self.calls.append(("compile", name, tuple(options)))
        return source

    def load(self, image):
        return CpuModule.compile(image, "kernels.cu")

    def function(self, module, name):
        return (module, name)

    def allow_dynamic_shared_memory(self, function, nbytes):
        self.calls.append(("opt-in", function[1], nbytes))

    def allocate(self, nbytes):
        buffer = np.zeros(nbytes, np.uint8)
        self.buffers[buffer.ctypes.data] = buffer
        return buffer.ctypes.data

    def zero(self, pointer, nbytes):
        ctypes.memset(pointer, 0, nbytes)

    def copy_to_device(self, pointer, array):
        ctypes.memmove(pointer, array.ctypes.data, array.nbytes)

    def copy_from_device(self, pointer, nbytes):
        return ctypes.string_at(pointer, nbytes)

    def launch(self, function, grid, block, shared_bytes, arguments):
        module, name = function
        self.calls.append(("launch", name, tuple(grid), tuple(block), shared_bytes))
        (base, buffer), = self.buffers.items()
        values = []
        for param, value in zip(module.kernels[name].params, arguments):
            if param.kind == POINTER:
                dtype = np.dtype(_POINTEE_DTYPES[(param.pointee_kind, param.pointee_size)][0])
                offset = value.value - base
                values.append(np.frombuffer(buffer, dtype, (buffer.nbytes - offset) // dtype.itemsize, offset))
            else:
                values.append(np.uint16(value.value) if isinstance(value, ctypes.c_uint16) else value.value)
        module.launch(name, grid, block, values, shared_bytes)

    def synchronize(self):
        self.calls.append(("synchronize",))

    def free(self, pointer):
        self.calls.append(("free",))


def test_kernels_cu_on_stdout_says_no_manifest_was_written(tmp_path, capsys):
    program = tmp_path / "small.ir"
    program.write_text(SMALL)
    assert driver.main([str(program)]) == 0
    header = capsys.readouterr().out.splitlines()[:3]
    assert any("No manifest was written" in line for line in header)
    assert not list(tmp_path.glob("*.json"))
    compiled(tmp_path, SMALL, "with_o")
    assert "manifest (.json) beside this file" in (tmp_path / "with_o.cu").read_text().splitlines()[1]


def test_the_manifest_says_which_launches_need_the_shared_memory_opt_in(tmp_path):
    _, document = compiled(tmp_path, ATTENTION, "attention")
    launches = document["launches"]
    assert any(launch["shared_opt_in"] for launch in launches), "the flash-attention kernel should need the opt-in"
    assert all(launch["shared_opt_in"] == (launch["static_shared_bytes"] + launch["shared_bytes"] > DEFAULT_DYNAMIC_SHARED_LIMIT) for launch in launches)
    assert document["compile_options"] == ["-std=c++17"]
    broken = json.loads(json.dumps(document))
    broken["launches"][0]["shared_opt_in"] = not broken["launches"][0]["shared_opt_in"]
    with pytest.raises(ManifestError, match=r"launches\[0\]\.shared_opt_in: must be"):
        Manifest.from_dict(broken)
    del broken["launches"][0]["shared_opt_in"], broken["compile_options"]  # older documents still read
    assert Manifest.from_dict(broken).compile_options == ("-std=c++17",)


def test_the_python_host_imports_without_cuda_and_plans_memory_as_fusecc_does(tmp_path):
    host = load_host_module()
    for text, name in ((SMALL, "small"), (ATTENTION, "attention")):
        _, document = compiled(tmp_path, text, name)
        plan, reference = host.plan_memory(document), execute.plan_memory(Manifest.from_dict(document))
        assert plan.offsets == reference.offsets and plan.total_bytes == reference.total_bytes


@pytest.mark.parametrize("text, name", [(SMALL, "small"), (ATTENTION, "attention")])
def test_the_python_host_runs_the_pair_through_its_driver_interface(text, name, tmp_path):
    host = load_host_module()
    source, document = compiled(tmp_path, text, name)
    module = parse_module(text)
    func = module.functions()[0]
    rng = np.random.default_rng(0)
    inputs = {arg.name_hint: rng.standard_normal(arg.type.shape).astype(np.float32) for arg in func.arguments}
    if "b" in inputs:
        inputs["b"] = host.from_device(host.bf16_bits(inputs["b"]).tobytes(), {"dtype": "bf16", "shape": [16]})  # bf16 values
    fake = HarnessDriver()
    outputs = host.run(document, source.read_text(), inputs, fake)
    (expected,) = evaluate(module, func.sym_name, [inputs[arg.name_hint] for arg in func.arguments])
    np.testing.assert_allclose(outputs["result0"], expected, rtol=1e-5, atol=1e-5)
    launched = [call for call in fake.calls if call[0] == "launch"]
    assert [(c[1], c[2], c[3], c[4]) for c in launched] == [(l["kernel"], tuple(l["grid"]), tuple(l["block"]), l["shared_bytes"]) for l in document["launches"]]
    opt_ins = {c[1]: c[2] for c in fake.calls if c[0] == "opt-in"}
    assert opt_ins == {l["kernel"]: l["shared_bytes"] for l in document["launches"] if l["shared_opt_in"]}
    first_launch = fake.calls.index(launched[0])
    assert all(fake.calls.index(("opt-in", k, n)) < first_launch for k, n in opt_ins.items())
    assert fake.calls[0] == ("compile", source.name, ("-std=c++17",))


def test_the_python_host_calls_only_what_cuda_bindings_has():
    bindings = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is the 'cuda' extra")
    from cuda.bindings import nvrtc

    text = (HOST / "launch.py").read_text()
    import re

    for name in set(re.findall(r"self\.cu\.(cu\w+)", text)):
        assert hasattr(bindings, name), name
    for name in set(re.findall(r"self\.nvrtc\.(nvrtc\w+)", text)):
        assert hasattr(nvrtc, name), name
    assert bindings.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


def cuda_headers() -> list[str]:
    """Include folders holding cuda.h (the toolkit) and nvrtc.h (the toolkit
    or the nvidia-cuda-nvrtc wheel of the 'cuda' extra)."""
    candidates = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", *sorted(map(str, pathlib.Path("/usr/local").glob("cuda-*")))]
    folders = [f"{c}/include" for c in candidates if c and pathlib.Path(c, "include", "cuda.h").exists()][:1]
    nvrtc = [str(p.parent) for p in pathlib.Path(sys.prefix).glob("lib/python*/site-packages/nvidia/*/include/nvrtc.h")]
    nvrtc += [f for f in folders if pathlib.Path(f, "nvrtc.h").exists()]
    return folders + nvrtc[:1] if folders and nvrtc else []


def test_the_cpp_host_compiles_against_the_cuda_headers(tmp_path):
    folders = cuda_headers()
    if not folders or shutil.which("g++") is None:
        pytest.skip("needs g++, cuda.h (CUDA toolkit) and nvrtc.h (toolkit or nvidia-cuda-nvrtc)")
    includes = [f"-I{f}" for f in folders]
    result = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", *includes, str(HOST / "launch.cpp")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    if shutil.which("nvcc"):
        result = subprocess.run(["nvcc", "-std=c++17", "-c", "-o", str(tmp_path / "launch.o"), *includes, str(HOST / "launch.cpp")], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr


def test_the_python_host_uploads_the_weights_from_the_safetensors_file(tmp_path):
    """Weights above 1 KiB are not in kernels.cu: launch.py reads them from
    kernels.safetensors beside kernels.json and passes them as arguments."""
    host = load_host_module()
    rng = np.random.default_rng(5)
    w = rng.standard_normal((32, 16)).astype(np.float32)  # 2 KiB
    dense = "[" + ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in w) + "]"
    text = f"""func.func @main(%x: tensor<4x32xf32>) -> tensor<4x16xf32> {{
  %w = tensor.constant {{value = dense<{dense}> : tensor<32x16xf32>}} : () -> tensor<32x16xf32>
  %0 = tensor.matmul %x, %w : (tensor<4x32xf32>, tensor<32x16xf32>) -> tensor<4x16xf32>
  %1 = tensor.tanh %0 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  func.return %1 : tensor<4x16xf32>
}}
"""
    source, document = compiled(tmp_path, text, "weighted")
    assert document["version"] == 2 and [c["file"] for c in document["constants"]] == ["weighted.safetensors"]
    assert repr(float(w[0, 0])) not in source.read_text()
    plan, reference = host.plan_memory(document), execute.plan_memory(Manifest.from_dict(document))
    assert (plan.offsets, plan.constant_offsets, plan.total_bytes) == (reference.offsets, reference.constant_offsets, reference.total_bytes)
    x = rng.standard_normal((4, 32)).astype(np.float32)
    outputs = host.run(host.read_manifest(tmp_path / "weighted.json"), source.read_text(), {"x": x}, HarnessDriver(), tmp_path)
    np.testing.assert_allclose(outputs["result0"], np.tanh(x.astype(np.float64) @ w), rtol=1e-5, atol=1e-5)
    escaping = json.loads(json.dumps(document))
    escaping["constants"][0]["file"] = "../weighted.safetensors"
    with pytest.raises(SystemExit, match=r"is not inside"):
        host.run(escaping, source.read_text(), {"x": x}, HarnessDriver(), tmp_path / "sub")
