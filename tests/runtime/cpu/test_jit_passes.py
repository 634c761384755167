"""Which LLVM passes a module gets (runtime/cpu/jit.py): kernels the IR
pipeline at O3, the hand-written call-sequence runner code generation
alone, and the disk cache keeps the two kinds of object apart."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("llvmlite.binding")

from fusecc.runtime.cpu import jit  # noqa: E402
from fusecc.runtime.cpu.sequence import run_steps_function, runner_ir  # noqa: E402

SMALL = "define void @f(ptr %p) {\nentry:\n  store float 1.0, ptr %p\n  ret void\n}\n"


def test_without_ir_passes_no_pass_pipeline_runs(monkeypatch):
    """The pipeline aborts the child here: code generation alone never reaches it."""
    monkeypatch.setattr(jit, "optimise", lambda text: os.abort())
    assert jit.object_code(runner_ir(), ir_passes=False)
    with pytest.raises(jit.LLVMCrash, match="SIGABRT"):
        jit.object_code(runner_ir())


def test_the_runner_is_compiled_without_ir_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSECC_CACHE_DIR", str(tmp_path))  # nothing from disk or memory: it is compiled here
    monkeypatch.setattr(jit, "_compiled", {})
    monkeypatch.setattr("fusecc.runtime.cpu.sequence._runner", None)
    monkeypatch.setattr(jit, "optimise", lambda text: os.abort())
    assert run_steps_function() is not None


def test_the_disk_cache_keeps_objects_of_either_kind_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSECC_CACHE_DIR", str(tmp_path))
    assert jit._cached_objects([SMALL], ir_passes=False)[1] is False
    assert jit._cached_objects([SMALL], ir_passes=False)[1] is True
    assert jit._cached_objects([SMALL])[1] is False  # another key: compiled again
    assert jit._cached_objects([SMALL])[1] is True
