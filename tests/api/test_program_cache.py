"""The disk cache of compiled programs (driver/program_cache.py,
runtime/cpu/image.py): a second `fusecc.compile` of the same ONNX file in a
new process loads the compiled program without the onnx package and
without running a pass, and gives the same results; anything that changes
the program (the file's bytes, the shapes, a damaged entry) compiles again."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fusecc  # noqa: E402
from fusecc.compiler import pass_manager  # noqa: E402
from fusecc.driver import program_cache  # noqa: E402
from fusecc.runtime.cpu.executor import CompiledProgram  # noqa: E402
from fusecc.runtime.cpu.image import ImageError, image_bytes, load_image  # noqa: E402

pytest.importorskip("llvmlite")

# Runs in a fresh process: compiles the model, saves the result, and says
# whether the program came from the cache, whether the onnx package was
# imported, how many passes ran and how many LLVM children were started.
CHILD = r"""
import json, sys
import numpy as np
import fusecc
from fusecc.compiler import pass_manager
from fusecc.runtime.cpu import jit
passes, llvm = [], []
run_pass, start_child = pass_manager._run_pass, jit._start_child
pass_manager._run_pass = lambda p, *rest: (passes.append(p.name), run_pass(p, *rest))[1]
jit._start_child = lambda *args: (llvm.append(1), start_child(*args))[1]
path, shapes, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
program = fusecc.compile(path, target="cpu", shapes=shapes or None, options={"threads": 1})
x = np.linspace(-1, 1, 4 * 64, dtype=np.float32).reshape(4, 64)
np.save(out, program(x=x)["y"])
print(json.dumps({"from_cache": program.stats.from_cache, "onnx": "onnx" in sys.modules, "passes": len(passes), "llvm": len(llvm),
                  "kernels": program.kernels, "inputs": {k: str(t) for k, t in program.inputs.items()}}))
"""


def write_model(path, weight_scale: float = 1.0, rows="4") -> str:
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((64, 96)) * weight_scale).astype(np.float32)
    bias = rng.standard_normal(96).astype(np.float32)
    rows_dim = int(rows) if rows.isdigit() else rows
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows_dim, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows_dim, 96])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


def expected(weight_scale: float = 1.0, x: np.ndarray | None = None) -> np.ndarray:
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((64, 96)) * weight_scale).astype(np.float32)
    bias = rng.standard_normal(96).astype(np.float32)
    x = np.linspace(-1, 1, 4 * 64, dtype=np.float32).reshape(4, 64) if x is None else x
    return np.maximum(x @ weight + bias, 0)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("FUSECC_CACHE_DIR", str(folder))
    return folder


def compile_in_child(tmp_path, path: str, shapes=None, name="out.npy") -> tuple[dict, np.ndarray]:
    out = tmp_path / name
    env = dict(os.environ, FUSECC_PROGRESS="0")
    env.pop("FUSECC_VERIFY_EACH", None)
    done = subprocess.run([sys.executable, "-c", CHILD, path, json.dumps(shapes or {}), str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), np.load(out)


def test_a_warm_compile_imports_no_onnx_and_runs_no_pass(tmp_path, cache_dir):
    path = write_model(tmp_path / "m.onnx")
    cold, cold_out = compile_in_child(tmp_path, path, name="cold.npy")
    warm, warm_out = compile_in_child(tmp_path, path, name="warm.npy")
    assert cold["from_cache"] is False and cold["passes"] > 0
    assert warm["from_cache"] is True
    assert warm["onnx"] is False, "a warm hit must not import the onnx package"
    assert warm["passes"] == 0, "a warm hit must not run the passes"
    assert warm["kernels"] == cold["kernels"] and warm["inputs"] == cold["inputs"]
    np.testing.assert_array_equal(warm_out, cold_out)
    np.testing.assert_allclose(warm_out, expected(), rtol=1e-5, atol=1e-5)


def test_a_changed_model_file_compiles_again(tmp_path, cache_dir):
    path = write_model(tmp_path / "m.onnx")
    compile_in_child(tmp_path, path)
    write_model(tmp_path / "m.onnx", weight_scale=2.0)  # same path, other weights
    again, out = compile_in_child(tmp_path, path)
    assert again["from_cache"] is False
    np.testing.assert_allclose(out, expected(2.0), rtol=1e-5, atol=1e-5)


def test_other_shapes_are_another_entry(tmp_path, cache_dir):
    path = write_model(tmp_path / "m.onnx", rows="N")
    first, _ = compile_in_child(tmp_path, path, shapes={"x": [4, 64]})
    other = fusecc.compile(path, target="cpu", shapes={"x": (2, 64)})
    again, out = compile_in_child(tmp_path, path, shapes={"x": [4, 64]})
    assert (first["from_cache"], other.stats.from_cache, again["from_cache"]) == (False, False, True)
    assert again["inputs"] == {"x": "tensor<4x64xf32>"}
    np.testing.assert_allclose(out, expected(), rtol=1e-5, atol=1e-5)


def test_a_program_with_dynamic_dims_is_kept_as_its_loop_level_module(tmp_path, cache_dir):
    """A warm compile of a `?` program runs no pass and no LLVM, imports no
    onnx, and the program it loads runs every size as the compiled one did."""
    path = write_model(tmp_path / "m.onnx", rows="N")
    cold, cold_out = compile_in_child(tmp_path, path, name="cold.npy")
    warm, warm_out = compile_in_child(tmp_path, path, name="warm.npy")
    assert cold["from_cache"] is False and cold["passes"] > 0 and cold["llvm"] > 0
    assert warm["from_cache"] is True
    assert (warm["passes"], warm["llvm"], warm["onnx"]) == (0, 0, False)
    assert warm["kernels"] == cold["kernels"] and warm["inputs"] == cold["inputs"] == {"x": "tensor<?x64xf32>"}
    np.testing.assert_array_equal(warm_out, cold_out)
    np.testing.assert_allclose(warm_out, expected(), rtol=1e-5, atol=1e-5)
    assert [p.name for p in (cache_dir / program_cache.LOOPS_KIND).iterdir() if p.name != ".lock"]
    program = fusecc.compile(path, target="cpu")
    assert program.stats.from_cache and "loop.schedule" in program.source("loop")
    for rows in (1, 3, 17):
        x = np.random.default_rng(rows).standard_normal((rows, 64)).astype(np.float32)
        np.testing.assert_allclose(program(x=x)["y"], expected(x=x), rtol=1e-5, atol=1e-5)


def test_a_dynamic_programs_lost_or_damaged_module_is_compiled_and_kept_again(tmp_path, cache_dir, caplog):
    path = write_model(tmp_path / "m.onnx", rows="N")
    fusecc.compile(path, target="cpu")
    program_cache.wait_for_stores()
    loops = cache_dir / program_cache.LOOPS_KIND
    [entry] = [p for p in loops.iterdir() if p.name != ".lock"]
    shutil.rmtree(entry)  # evicted: the empty "program" entry stays
    assert fusecc.compile(path, target="cpu").stats.from_cache is False
    program_cache.wait_for_stores()
    module = entry / program_cache.LOOPS_MODULE
    module.write_text(module.read_text().replace("loop.kernel", "loop.kernel ", 1))  # one byte more
    with caplog.at_level("WARNING", logger="fusecc.cache"):
        assert fusecc.compile(path, target="cpu").stats.from_cache is False
    assert "does not match its digest" in caplog.text
    program_cache.wait_for_stores()
    program = fusecc.compile(path, target="cpu")
    assert program.stats.from_cache is True
    np.testing.assert_allclose(program(x=np.ones((2, 64), np.float32))["y"], expected(x=np.ones((2, 64), np.float32)), rtol=1e-5, atol=1e-5)


def test_a_dynamic_programs_module_that_does_not_parse_is_compiled_again(tmp_path, cache_dir, caplog):
    """An entry with a valid digest whose module this fusecc cannot read
    (written by hand here) is a warning and a compile, never an error."""
    from fusecc.runtime import cache

    path = write_model(tmp_path / "m.onnx", rows="N")
    fusecc.compile(path, target="cpu")
    program_cache.wait_for_stores()
    [entry] = [p for p in (cache_dir / program_cache.LOOPS_KIND).iterdir() if p.name != ".lock"]
    (entry / program_cache.LOOPS_MODULE).write_text("loop.kernel @broken {\n")
    (entry / cache.DIGEST_FILE).write_text(cache.content_digest(entry))
    with caplog.at_level("WARNING", logger="fusecc.cache"):
        program = fusecc.compile(path, target="cpu")
    assert program.stats.from_cache is False
    assert "could not be loaded" in caplog.text
    x = np.ones((3, 64), np.float32)
    np.testing.assert_allclose(program(x=x)["y"], expected(x=x), rtol=1e-5, atol=1e-5)
    program_cache.wait_for_stores()
    assert fusecc.compile(path, target="cpu").stats.from_cache is True  # kept again


def test_a_damaged_entry_is_rebuilt_with_a_warning(tmp_path, cache_dir, caplog):
    path = write_model(tmp_path / "m.onnx")
    fusecc.compile(path, target="cpu")
    program_cache.wait_for_stores()  # the entry is written on a background thread
    [entry] = [p for p in (cache_dir / program_cache.KIND).iterdir() if p.name != ".lock"]
    data = entry / "data"
    blob = bytearray(data.read_bytes())
    blob[-1] ^= 0xFF  # a byte of the last constant
    data.write_bytes(bytes(blob))
    with caplog.at_level("WARNING", logger="fusecc.cache"):
        program = fusecc.compile(path, target="cpu")
    assert program.stats.from_cache is False
    assert "does not match its digest" in caplog.text
    x = np.linspace(-1, 1, 4 * 64, dtype=np.float32).reshape(4, 64)
    np.testing.assert_allclose(program(x=x)["y"], expected(), rtol=1e-5, atol=1e-5)
    assert fusecc.compile(path, target="cpu").stats.from_cache is True


def test_a_hit_in_process_loads_the_model_only_when_asked(tmp_path, cache_dir):
    path = write_model(tmp_path / "m.onnx")
    cold = fusecc.compile(path, target="cpu")
    warm = fusecc.compile(path, target="cpu")
    assert warm.stats.from_cache and warm._module is None
    assert warm.kernels == cold.kernels and warm.stats.functions == cold.stats.functions
    assert "loop.schedule" in warm.source("loop")  # compiled again, on request
    assert warm.module.functions()[0].sym_name == cold.entry


def test_the_key_follows_the_compilers_source(tmp_path):
    path = write_model(tmp_path / "m.onnx")
    key = program_cache.program_key(path, {"target": "cpu"})
    assert key == program_cache.program_key(path, {"target": "cpu"})
    assert key != program_cache.program_key(path, {"target": "cpu", "entry": "f"})
    program_cache.source_identity.cache_clear()
    try:
        real = program_cache.SOURCE_PACKAGES
        program_cache.SOURCE_PACKAGES = real[:-1]
        assert program_cache.program_key(path, {"target": "cpu"}) != key
    finally:
        program_cache.SOURCE_PACKAGES = real
        program_cache.source_identity.cache_clear()


def test_an_image_runs_like_the_program_it_was_made_from(tmp_path):
    program = fusecc.compile(write_model(tmp_path / "m.onnx"), target="cpu")
    compiled: CompiledProgram = program._compiled
    chunks = image_bytes(compiled, {"note": "mine"})
    loaded, meta = load_image(b"".join(bytes(c) for c in chunks))
    assert meta == {"note": "mine"}
    x = np.linspace(-1, 1, 4 * 64, dtype=np.float32).reshape(4, 64)
    np.testing.assert_array_equal(loaded.run([x])[0], compiled.run([x])[0])
    assert loaded.prepare("main").load_launches == compiled.prepare("main").load_launches > 0  # weights packed at load
    with pytest.raises(ImageError):
        load_image(b"not an image")


def test_passes_are_verified_each_only_when_asked(tmp_path, monkeypatch):
    calls = []
    verify_after = pass_manager._verify_after
    monkeypatch.setattr(pass_manager, "_verify_after", lambda p, op: (calls.append(p.name), verify_after(p, op)))
    source = tmp_path / "p.ir"
    source.write_text("func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {\n  %y = tensor.add %x, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>\n  func.return %y : tensor<8xf32>\n}\n")
    monkeypatch.delenv("FUSECC_VERIFY_EACH", raising=False)
    fusecc.compile(str(source), target="cpu")
    assert calls == []
    monkeypatch.setenv("FUSECC_VERIFY_EACH", "1")
    fusecc.compile(str(source), target="cpu")
    assert calls


def test_changed_compiler_options_are_another_entry(tmp_path, cache_dir, monkeypatch):
    path = write_model(tmp_path / "m.onnx")
    x = np.linspace(-1, 1, 4 * 64, dtype=np.float32).reshape(4, 64)

    def compiled(**options):
        program = fusecc.compile(path, target="cpu", options=options or None)
        np.testing.assert_allclose(program(x=x)["y"], expected(), rtol=1e-5, atol=1e-5)
        program_cache.wait_for_stores()
        return program.stats.from_cache

    assert compiled() is False
    assert compiled(entry="main") is False  # the entry named
    monkeypatch.setenv("FUSECC_CPU_FEATURES", "-avx512f")  # code for other CPU features
    assert compiled() is False
    assert compiled() is True
    monkeypatch.delenv("FUSECC_CPU_FEATURES")
    assert (compiled(), compiled(entry="main")) == (True, True)


def hashes_counted(monkeypatch) -> list:
    hashed = []
    real = program_cache._hash_file
    monkeypatch.setattr(program_cache, "_hash_file", lambda f: (hashed.append(f.name), real(f))[1])
    return hashed


def test_a_settled_model_files_digest_is_remembered_until_it_changes(tmp_path, cache_dir, monkeypatch):
    path = write_model(tmp_path / "m.onnx")
    monkeypatch.setattr(program_cache, "RACY_SECONDS", -3600.0)  # as if the file had been written an hour ago
    hashed = hashes_counted(monkeypatch)
    first = program_cache.file_digest(path)
    assert program_cache.file_digest(path) == first and len(hashed) == 1  # the second one remembered
    status = os.stat(path)
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF
    with open(path, "r+b") as f:  # same inode, same size, the modification time put back
        f.write(data)
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    changed = program_cache.file_digest(path)
    assert len(hashed) == 2 and changed != first
    assert changed == hashlib.sha256(bytes(data)).hexdigest()


def test_a_model_file_written_just_now_is_hashed_every_time(tmp_path, cache_dir, monkeypatch):
    path = write_model(tmp_path / "m.onnx")  # a write in the same clock tick could go unseen
    hashed = hashes_counted(monkeypatch)
    assert program_cache.file_digest(path) == program_cache.file_digest(path)
    assert len(hashed) == 2
    assert not [p for p in (cache_dir / program_cache.DIGEST_KIND).iterdir() if p.name != ".lock"]


def test_a_damaged_remembered_digest_is_not_trusted(tmp_path, cache_dir, monkeypatch, caplog):
    path = write_model(tmp_path / "m.onnx")
    monkeypatch.setattr(program_cache, "RACY_SECONDS", -3600.0)
    true = hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert program_cache.file_digest(path) == true
    [entry] = [p for p in (cache_dir / program_cache.DIGEST_KIND).iterdir() if p.name != ".lock"]
    (entry / "data").write_bytes(b"0" * 64)  # another model's digest, as it were
    hashed = hashes_counted(monkeypatch)
    with caplog.at_level("WARNING", logger="fusecc.cache"):
        assert program_cache.file_digest(path) == true
    assert len(hashed) == 1 and "does not match its digest" in caplog.text
