"""A long LLVM module is compiled as two modules at once (jit.split_module):
the parts together define every function once, each part is valid IR, and
a program compiled in parts computes what the reference does."""

from __future__ import annotations

import numpy as np
import pytest

llvm = pytest.importorskip("llvmlite.binding")

import fusecc  # noqa: E402
from fusecc.runtime.cpu import jit  # noqa: E402

TEXT = """; header comment
define void @"a"(ptr %p) {
entry:
  store float 1.0, ptr %p
  ret void
}

define void @"b"(ptr %p) {
entry:
  %x = call float @llvm.sqrt.f32(float 4.0)
  store float %x, ptr %p, !nontemporal !0
  ret void
}

define void @"c"(ptr %p, i64 %n) {
entry:
  %q = getelementptr float, ptr %p, i64 %n
  store float 3.0, ptr %q
  ret void
}

declare float @llvm.sqrt.f32(float)
attributes #0 = { nounwind }
!0 = !{i32 1}
"""


def defined(text: str) -> list[str]:
    module = llvm.parse_assembly(text)
    module.verify()
    return sorted(f.name for f in module.functions if not f.is_declaration)


def test_parts_define_every_function_once_and_each_is_valid_ir():
    parts = jit.split_module(TEXT, 2)
    assert len(parts) == 2
    names = [name for part in parts for name in defined(part)]
    assert sorted(names) == ["a", "b", "c"]
    assert all("declare float @llvm.sqrt.f32(float)" in part and "!0 = !{i32 1}" in part for part in parts)


def test_no_split_with_globals_or_one_function():
    assert jit.split_module('@g = global i32 0\n' + TEXT, 2) == ['@g = global i32 0\n' + TEXT]
    one = TEXT[TEXT.index("define void @\"c\""):]
    assert jit.split_module(one, 2) == [one]
    assert jit.split_module(TEXT, 1) == [TEXT]


def test_a_program_compiled_in_parts_matches_the_reference(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSECC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(jit, "SPLIT_CHARACTERS", 0)
    split = []
    real = jit.split_module
    monkeypatch.setattr(jit, "split_module", lambda text, parts: split.append(len(real(text, parts))) or real(text, parts))
    source = tmp_path / "p.ir"
    source.write_text(
        "func.func @main(%x: tensor<64x64xf32>, %w: tensor<64x64xf32>) -> tensor<64xf32> {\n"
        "  %m = tensor.matmul %x, %w : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>\n"
        "  %r = tensor.reduce_sum %m {axes = [1]} : (tensor<64x64xf32>) -> tensor<64xf32>\n"
        "  func.return %r : tensor<64xf32>\n}\n"
    )
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 64, 64), dtype=np.float32)
    cpu = fusecc.compile(str(source), target="cpu")
    assert split and split[0] == 2 and len(cpu._compiled.objects) == 2
    expected = fusecc.compile(str(source), target="reference")(x, w)["result0"]
    np.testing.assert_allclose(cpu(x, w)["result0"], expected, rtol=1e-4, atol=1e-4)
