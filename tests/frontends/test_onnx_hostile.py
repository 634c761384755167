"""Models written by strangers (issue 17.2): external data stays inside the
model's folder, declared sizes must match the bytes before anything is
mapped, and a model declaring more than the memory budget is refused before
it is loaded. Each case is a small hand-made hostile model."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto
from onnx_models import FLOAT, initializer, node, save, value

from fusecc.frontends.onnx import ModelError, import_onnx
from fusecc.tools.fusecc import main as fusecc_main


def external(name: str, dims, location: str, offset: int = 0, length: int | None = None) -> TensorProto:
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(dims))
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset)}
    if length is not None:
        entries["length"] = str(length)
    for key, text in entries.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, text
    return tensor


def model_with(folder, weight: TensorProto, name="model.onnx"):
    dims = list(weight.dims)
    return save(folder, [node("Add", ["x", "w"], ["y"])], [value("x", FLOAT, dims)], [value("y", FLOAT, dims)], [weight], name=name)


def write_weights(path, count: int) -> np.ndarray:
    data = np.arange(count, dtype=np.float32)
    data.tofile(path)
    return data


def test_external_data_inside_the_folder_is_mapped_and_used(tmp_path):
    data = write_weights(tmp_path / "weights.bin", 16)
    path = model_with(tmp_path, external("w", [2, 4], "weights.bin", offset=32, length=32))
    module = import_onnx(str(path)).module
    constant = next(op for op in module.walk() if op.name == "tensor.constant")
    np.testing.assert_array_equal(constant.attributes["value"].array, data[8:16].reshape(2, 4))


@pytest.mark.parametrize(
    "location, reason",
    [
        ("/etc/passwd", "absolute path"),
        ("../outside.bin", "climbs out with '..'"),
        ("sub/../../outside.bin", "climbs out with '..'"),
        ("link.bin", "symbolic link"),
        ("missing.bin", "does not exist"),
        ("sub", "not a regular file"),
    ],
)
def test_external_data_outside_the_folder_is_refused(tmp_path, location, reason):
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    write_weights(tmp_path / "outside.bin", 8)
    os.symlink(tmp_path / "outside.bin", folder / "link.bin")
    path = model_with(folder, external("w", [2, 4], location))
    with pytest.raises(ModelError, match=reason):
        import_onnx(str(path))


def test_a_symlink_that_stays_inside_the_folder_is_fine(tmp_path):
    write_weights(tmp_path / "real.bin", 8)
    os.symlink("real.bin", tmp_path / "alias.bin")
    import_onnx(str(model_with(tmp_path, external("w", [2, 4], "alias.bin"))))


@pytest.mark.parametrize(
    "offset, length, message",
    [
        (0, None, "needs bytes 0..4000000 of 'weights.bin', which has only 32"),
        (24, 32, "needs bytes 24..56"),
        (0, 16, "declares 32 bytes"),
        (-8, 32, "declares 32 bytes"),
    ],
)
def test_declared_sizes_are_checked_against_the_file_before_mapping(tmp_path, offset, length, message):
    write_weights(tmp_path / "weights.bin", 8)
    dims = [1000, 1000] if length is None else [2, 4]
    path = model_with(tmp_path, external("w", dims, "weights.bin", offset, length))
    with pytest.raises(ModelError, match=message.replace("(", r"\(").replace(")", r"\)")):
        import_onnx(str(path))


def test_inline_data_shorter_than_its_dims_is_refused(tmp_path):
    weight = initializer("w", np.zeros((2, 4), np.float32))
    weight.dims[0] = 1 << 30  # claims 4 GiB, holds 32 bytes
    with pytest.raises(ModelError, match="over the memory budget"):
        import_onnx(str(model_with(tmp_path, weight)), {"x": (2, 4)})
    weight.dims[0] = 3
    with pytest.raises(ModelError, match=r"declares 48 bytes \[3, 4\] but holds 32"):
        import_onnx(str(model_with(tmp_path, weight)), {"x": (2, 4)})


def test_a_model_over_the_memory_budget_is_refused_before_loading(tmp_path, monkeypatch):
    write_weights(tmp_path / "weights.bin", 1024)
    path = model_with(tmp_path, external("w", [32, 32], "weights.bin"))
    import_onnx(str(path))  # 4 KiB: under the default budget
    with pytest.raises(ModelError, match="declares 4096 bytes of tensors, over the memory budget of 4000"):
        import_onnx(str(path), budget=4000)
    monkeypatch.setenv("FUSECC_ONNX_MEMORY_BUDGET", "2K")
    with pytest.raises(ModelError, match="over the memory budget of 2048"):
        import_onnx(str(path))


def test_constant_of_shape_cannot_allocate_past_the_budget(tmp_path):
    nodes = [node("ConstantOfShape", ["shape"], ["zeros"]), node("Add", ["x", "zeros"], ["y"])]
    shape = initializer("shape", np.array([1 << 20, 1 << 20], np.int64))
    path = save(tmp_path, nodes, [value("x", FLOAT, [1])], [value("y", FLOAT, None)], [shape])
    with pytest.raises(ModelError, match=r"node 'zeros' \(ConstantOfShape\): would create a \[1048576, 1048576\] tensor"):
        import_onnx(str(path))


def test_the_command_line_reports_a_hostile_model_with_exit_1(tmp_path, capsys):
    write_weights(tmp_path / "outside.bin", 8)
    folder = tmp_path / "model"
    folder.mkdir()
    path = model_with(folder, external("w", [2, 4], "../outside.bin"))
    assert fusecc_main(["import", str(path), "-o", str(tmp_path / "m.ir")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fusecc import: error: ") and "outside the model's folder" in err and "Traceback" not in err
    assert fusecc_main(["run", str(path), "--random-inputs", "--memory-budget", "1K"]) == 1
    assert "climbs out" in capsys.readouterr().err


def test_a_file_that_is_not_onnx_is_a_plain_error(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x08\x07\xff\xff\xff garbage")
    with pytest.raises(ModelError, match="could not read .* as an ONNX model"):
        import_onnx(str(path))


def test_a_broadcast_between_constants_cannot_allocate_past_the_budget(tmp_path):
    column = initializer("column", np.zeros((1 << 16, 1), np.float32))
    row = initializer("row", np.zeros((1, 1 << 16), np.float32))
    nodes = [node("Add", ["column", "row"], ["big"], name="/outer"), node("Add", ["x", "big"], ["y"])]
    path = save(tmp_path, nodes, [value("x", FLOAT, [1])], [value("y", FLOAT, None)], [column, row])
    with pytest.raises(ModelError, match=r"node '/outer' \(Add\): would create a \[65536, 65536\] tensor \(17179869184 bytes\)"):
        import_onnx(str(path), budget=1 << 30)
