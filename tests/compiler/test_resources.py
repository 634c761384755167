"""`dense_resource<name>`: weights in a safetensors (or .npz) file beside
the module, mapped rather than copied, printed by name, written back by
`save_module`, seen by the reference and the CPU target, and every way
the file can be wrong reported at a source position."""

from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest
import safetensors.numpy

from fusecc.compiler import attributes as A
from fusecc.compiler.diagnostics import DiagnosticError
from fusecc.compiler.parser import parse_module
from fusecc.compiler.printer import print_op
from fusecc.compiler.types import TensorType, f32
from fusecc.compiler.resources import ResourceFile, resource_identity, save_module, write_safetensors
from fusecc.compiler.verifier import verify
from fusecc.runtime.reference import evaluate
from fusecc.tools import fusecc as driver

RNG = np.random.default_rng(7)
WEIGHT = RNG.standard_normal((3, 4)).astype(np.float32)
BIAS = RNG.standard_normal(4).astype(np.float32)

PROGRAM = """\
module attributes {{fusecc.resources = "{file}"}} {{
  func.func @main(%x: tensor<2x3xf32>) -> tensor<2x4xf32> {{
    %w = tensor.constant {{value = dense_resource<{weight}> : tensor<{shape}xf32>}} : () -> tensor<{shape}xf32>
    %b = tensor.constant {{value = dense_resource<"bias/0:x"> : tensor<4xf32>}} : () -> tensor<4xf32>
    %y = tensor.matmul %x, %w : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
    %z = tensor.add %y, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    func.return %z : tensor<2x4xf32>
  }}
}}
"""


def write_model(folder, file="weights.safetensors", weight="wq", shape="3x4", tensors=None):
    if tensors is None:
        tensors = {"wq": WEIGHT, "bias/0:x": BIAS}
    blob = folder / "weights.safetensors"
    safetensors.numpy.save_file(tensors, str(blob))
    path = folder / "model.ir"
    path.write_text(PROGRAM.format(file=file, weight=weight, shape=shape))
    return path


def parse_file(path, **kwargs):
    module = parse_module(path.read_text(), str(path), **kwargs)
    verify(module)
    return module


def constants(module):
    return [op.attr("value") for op in module.walk() if op.name == "tensor.constant"]


def test_resources_read_the_file_and_evaluate(tmp_path):
    module = parse_file(write_model(tmp_path))
    weight, bias = constants(module)
    assert isinstance(weight, A.DenseResourceElementsAttr) and weight.name == "wq"
    np.testing.assert_array_equal(weight.array, WEIGHT)
    np.testing.assert_array_equal(bias.array, BIAS)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    (out,) = evaluate(module, "main", [x])
    np.testing.assert_allclose(out, x @ WEIGHT + BIAS, rtol=1e-6)


def test_resources_are_mapped_not_copied(tmp_path):
    path = write_model(tmp_path)
    module = parse_file(path)
    weight = constants(module)[0]
    assert isinstance(weight.array, np.memmap) and not weight.array.flags.writeable
    # Change the file's bytes in place: a mapping sees the change, a copy would not.
    raw = (tmp_path / "weights.safetensors").read_bytes()
    offset = raw.index(WEIGHT.tobytes())
    with open(tmp_path / "weights.safetensors", "r+b") as f:
        f.seek(offset)
        f.write(np.float32(1234.5).tobytes())
    assert weight.array[0, 0] == np.float32(1234.5)


def test_printer_round_trips_resources(tmp_path):
    path = write_model(tmp_path)
    module = parse_file(path)
    text = print_op(module)
    assert 'dense_resource<wq> : tensor<3x4xf32>' in text
    assert 'dense_resource<"bias/0:x"> : tensor<4xf32>' in text
    assert 'fusecc.resources = "weights.safetensors"' in text
    again = parse_module(text, str(path))
    assert print_op(again) == text
    assert [a.array.tolist() for a in constants(again)] == [a.array.tolist() for a in constants(module)]


def test_save_module_writes_the_blob_and_externalizes_large_constants(tmp_path):
    big = RNG.standard_normal((16, 16)).astype(np.float32)
    text = """\
func.func @main(%x: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %w = tensor.constant {value = WEIGHTS} : () -> tensor<16x16xf32>
  %s = tensor.constant {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %y = tensor.matmul %x, %w : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %z = tensor.mul %y, %s : (tensor<16x16xf32>, tensor<f32>) -> tensor<16x16xf32>
  func.return %z : tensor<16x16xf32>
}
""".replace("WEIGHTS", str(A.dense(big, TensorType((16, 16), f32))))
    module = parse_module(text, "in.ir")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    blob = save_module(module, out_dir / "model.ir", externalize_bytes=256)
    assert blob == out_dir / "model.safetensors"
    written = (out_dir / "model.ir").read_text()
    assert "dense_resource<w> : tensor<16x16xf32>" in written and "dense<2.0>" in written
    assert len(written) < 1000  # the elements went to the blob
    again = parse_file(out_dir / "model.ir")
    np.testing.assert_array_equal(constants(again)[0].array, big)
    # Saving a module whose resources come from the file being replaced keeps the values.
    save_module(again, out_dir / "model.ir")
    np.testing.assert_array_equal(constants(parse_file(out_dir / "model.ir"))[0].array, big)


def test_npz_resources_are_mapped_when_stored(tmp_path):
    np.savez(tmp_path / "weights.npz", wq=WEIGHT, **{"bias/0:x": BIAS})
    path = tmp_path / "model.ir"
    path.write_text(PROGRAM.format(file="weights.npz", weight="wq", shape="3x4"))
    weight, bias = constants(parse_file(path))
    assert isinstance(weight.array, np.memmap)
    np.testing.assert_array_equal(weight.array, WEIGHT)
    np.testing.assert_array_equal(bias.array, BIAS)
    np.savez_compressed(tmp_path / "weights.npz", wq=WEIGHT, **{"bias/0:x": BIAS})
    weight, _ = constants(parse_file(path))
    np.testing.assert_array_equal(weight.array, WEIGHT)  # read, not mapped: still right


def test_bf16_resources_round_to_bf16(tmp_path):
    from fusecc.compiler.types import bf16

    values = np.array([1.0, 1.0078125, -2.5, 3.0], dtype=np.float32)
    write_safetensors({"w": (values, bf16)}, tmp_path / "w.safetensors")
    (tmp_path / "m.ir").write_text(
        'module attributes {fusecc.resources = "w.safetensors"} {\n'
        "  func.func @main() -> tensor<4xbf16> {\n"
        "    %w = tensor.constant {value = dense_resource<w> : tensor<4xbf16>} : () -> tensor<4xbf16>\n"
        "    func.return %w : tensor<4xbf16>\n  }\n}\n"
    )
    (attr,) = constants(parse_file(tmp_path / "m.ir"))
    np.testing.assert_array_equal(attr.array, values)


def test_canonicalize_does_not_fold_large_resources_into_text(tmp_path):
    from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline

    weight = RNG.standard_normal((128, 128)).astype(np.float32)
    safetensors.numpy.save_file({"w": weight}, str(tmp_path / "w.safetensors"))
    (tmp_path / "m.ir").write_text(
        'module attributes {fusecc.resources = "w.safetensors"} {\n'
        "  func.func @main(%x: tensor<4x128xf32>) -> tensor<4x128xf32> {\n"
        "    %w = tensor.constant {value = dense_resource<w> : tensor<128x128xf32>} : () -> tensor<128x128xf32>\n"
        "    %t = tensor.transpose %w {perm = [1, 0]} : (tensor<128x128xf32>) -> tensor<128x128xf32>\n"
        "    %y = tensor.matmul %x, %t : (tensor<4x128xf32>, tensor<128x128xf32>) -> tensor<4x128xf32>\n"
        "    func.return %y : tensor<4x128xf32>\n  }\n}\n"
    )
    module = parse_file(tmp_path / "m.ir")
    run_pipeline(parse_pipeline("canonicalize,cse"), module, PassContext())
    text = print_op(module)
    assert "dense_resource<w>" in text and "tensor.transpose" in text and "dense<" not in text


def test_cpu_target_reads_resources_and_its_cache_tells_files_apart(tmp_path):
    pytest.importorskip("llvmlite")
    from fusecc.driver import targets

    path = write_model(tmp_path)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    cpu = targets.get("cpu")
    module = parse_file(path)
    identity = resource_identity(module)
    (out,) = cpu.run(module, "main", [x], None)
    np.testing.assert_allclose(out, x @ WEIGHT + BIAS, rtol=1e-5, atol=1e-6)
    # Same text, other bytes (a new file, so a new identity): the other weights are used.
    os.remove(tmp_path / "weights.safetensors")
    safetensors.numpy.save_file({"wq": 2 * WEIGHT, "bias/0:x": BIAS}, str(tmp_path / "weights.safetensors"))
    os.utime(tmp_path / "weights.safetensors", ns=(1, 1))
    module = parse_file(path)
    assert resource_identity(module) != identity
    (out,) = cpu.run(module, "main", [x], None)
    np.testing.assert_allclose(out, x @ (2 * WEIGHT) + BIAS, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- errors


def error_of(path, **kwargs) -> str:
    with pytest.raises(DiagnosticError) as caught:
        parse_file(path, **kwargs)
    where = caught.value.diagnostic.location
    return f"{where.file}:{where.line}:{where.col}: {caught.value.diagnostic.message}"


@pytest.mark.parametrize(
    "change, where, message",
    [
        (dict(weight="nope"), ":3:50", "has no resource 'nope'"),
        (dict(shape="3x5"), ":3:50", "has shape [3, 4], but tensor<3x5xf32> needs [3, 5]"),
        (dict(file="missing.safetensors"), ":1:20", "does not exist"),
        (dict(file="../outside.safetensors"), ":1:20", "climbs out with '..'"),
        (dict(file="/etc/passwd"), ":1:20", "is an absolute path"),
    ],
)
def test_resource_errors_are_located(tmp_path, change, where, message):
    path = write_model(tmp_path, **change)
    text = error_of(path)
    assert f"model.ir{where}" in text and message in text


def test_dtype_mismatch_and_corrupt_files_are_located(tmp_path):
    path = write_model(tmp_path, tensors={"wq": WEIGHT.astype(np.float64), "bias/0:x": BIAS})
    assert "holds F64 elements, but tensor<3x4xf32> needs F32" in error_of(path)
    blob = tmp_path / "weights.safetensors"
    blob.write_bytes(blob.read_bytes()[:40])  # truncated
    text = error_of(path)
    assert "model.ir:1:20" in text and "not a valid safetensors file" in text
    (tmp_path / "weights.npz").write_bytes(b"PK\x03\x04 not really a zip")
    path.write_text(PROGRAM.format(file="weights.npz", weight="wq", shape="3x4"))
    assert "not a readable .npz" in error_of(path)


def test_symlinks_out_of_the_folder_are_refused_unless_the_path_is_explicit(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    inside = tmp_path / "model"
    inside.mkdir()
    path = write_model(inside)
    os.replace(inside / "weights.safetensors", outside / "weights.safetensors")
    os.symlink(outside / "weights.safetensors", inside / "weights.safetensors")
    assert "symbolic link" in error_of(path)
    module = parse_file(path, resource_file=str(outside / "weights.safetensors"))
    np.testing.assert_array_equal(constants(module)[0].array, WEIGHT)


def test_a_resource_without_a_file_says_how_to_name_one(tmp_path):
    path = tmp_path / "m.ir"
    path.write_text(
        "func.func @main() -> tensor<4xf32> {\n"
        "  %w = tensor.constant {value = dense_resource<w> : tensor<4xf32>} : () -> tensor<4xf32>\n"
        "  func.return %w : tensor<4xf32>\n}\n"
    )
    text = error_of(path)
    assert "m.ir:2:48" in text and "fusecc.resources" in text


def test_cli_reports_a_bad_resource_with_exit_1(tmp_path, capsys):
    path = write_model(tmp_path, shape="3x5")
    assert driver.main([str(path), "--emit=tensor"]) == 1
    err = capsys.readouterr().err
    assert f"{path}:3:50: error: resource 'wq' has shape [3, 4]" in err and "^" in err


def test_the_cuda_path_reads_resources_on_the_cpu_harness(tmp_path):
    from fusecc.compiler.pass_manager import PassContext, parse_pipeline, run_pipeline
    from fusecc.driver.cuda_level import build_manifest
    from fusecc.driver.pipelines import pipeline_for_level
    from fusecc.passes.backends.cuda.emit import emit_cuda

    from fusecc.runtime.cuda import execute
    module = parse_file(write_model(tmp_path))
    run_pipeline(parse_pipeline(pipeline_for_level("cuda", target="h200")), module, PassContext(target="h200"))
    cuda = emit_cuda(module)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    got = execute.run_on_cpu(build_manifest(module, cuda), cuda.text, {"x": x}, cache_dir=tmp_path / "cache")
    np.testing.assert_allclose(got["result0"], x @ WEIGHT + BIAS, rtol=1e-5, atol=1e-6)
