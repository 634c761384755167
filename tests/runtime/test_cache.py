"""The kernel cache (runtime/cache.py): private folders, refused roots,
digest-checked entries, no lock file per entry, LRU eviction."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from fusecc.runtime import cache


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    """A fresh cache root; the once-per-process checks and warnings start over."""
    path = tmp_path / "cache"
    monkeypatch.setenv("FUSECC_CACHE_DIR", str(path))
    monkeypatch.delenv("FUSECC_CACHE_MAX_BYTES", raising=False)
    cache._checked.cache_clear()
    monkeypatch.setattr(cache, "_warned", set())
    monkeypatch.setattr(cache, "_private", {})
    monkeypatch.setattr(cache, "counts", cache.Counts())
    yield path
    cache._checked.cache_clear()


def builder(payload: bytes, calls: list):
    def build(folder: Path) -> None:
        calls.append(folder)
        (folder / "library.so").write_bytes(payload)

    return build


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_folders_are_private_and_entries_are_reused(root):
    os.umask(0o002)  # a permissive umask must not leak into the cache's modes
    try:
        calls = []
        entry, hit = cache.fetch("cpu-harness", "k1", builder(b"code", calls))
        again, hit_again = cache.fetch("cpu-harness", "k1", builder(b"other", calls))
    finally:
        os.umask(0o022)
    assert (hit, hit_again) == (False, True) and len(calls) == 1 and again == entry
    assert (entry / "library.so").read_bytes() == b"code"
    assert mode(root) == mode(root / "cpu-harness") == mode(entry) == 0o700
    assert (root / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert (cache.counts.hits, cache.counts.builds) == (1, 1)


def test_bytes_entries_round_trip(root):
    data, hit = cache.fetch_bytes("cpu", "obj", lambda: b"\x7fELF object")
    again, hit_again = cache.fetch_bytes("cpu", "obj", lambda: pytest.fail("rebuilt a valid entry"))
    assert data == again == b"\x7fELF object" and (hit, hit_again) == (False, True)


@pytest.mark.parametrize("bits", [stat.S_IWOTH, stat.S_IWGRP], ids=["world-writable", "group-writable"])
def test_a_root_writable_by_others_is_refused_with_one_warning(root, bits, caplog):
    root.mkdir(mode=0o700)
    os.chmod(root, 0o700 | bits)
    calls = []
    with caplog.at_level(logging.WARNING, logger="fusecc.cache"):
        first, hit = cache.fetch("cpu-harness", "k1", builder(b"code", calls))
        second, _ = cache.fetch("cpu", "k2", builder(b"more", calls))
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "writable by" in warnings[0] and str(root) in warnings[0]
    assert not hit and len(calls) == 2
    assert list(root.iterdir()) == []  # nothing read from or written to the refused root
    assert root not in first.parents and (first / "library.so").read_bytes() == b"code"
    assert mode(first) == 0o700  # the private replacement folder


def test_a_root_owned_by_another_user_is_refused(root, monkeypatch, caplog):
    root.mkdir(mode=0o700)
    monkeypatch.setattr(cache.os, "getuid", lambda: os.stat(root).st_uid + 1)
    with caplog.at_level(logging.WARNING, logger="fusecc.cache"):
        entry, hit = cache.fetch("cpu", "k1", builder(b"code", []))
    assert not hit and root not in entry.parents
    assert "owned by user id" in caplog.text and "compiling without a disk cache" in caplog.text


def test_a_kind_folder_writable_by_others_is_refused(root, caplog):
    (root / "cubin").mkdir(parents=True, mode=0o700)
    os.chmod(root, 0o700)
    os.chmod(root / "cubin", 0o777)
    with caplog.at_level(logging.WARNING, logger="fusecc.cache"):
        entry, _ = cache.fetch("cubin", "k1", builder(b"code", []))
    assert root not in entry.parents and "cubin" in caplog.text


def test_a_tampered_entry_is_rebuilt_with_a_warning(root, caplog):
    calls = []
    entry, _ = cache.fetch("cpu-harness", "k1", builder(b"good code", calls))
    (entry / "library.so").write_bytes(b"evil code")
    with caplog.at_level(logging.WARNING, logger="fusecc.cache"):
        again, hit = cache.fetch("cpu-harness", "k1", builder(b"good code", calls))
    assert not hit and len(calls) == 2 and (again / "library.so").read_bytes() == b"good code"
    assert "does not match its digest" in caplog.text


def test_a_tampered_blob_is_never_returned(root, caplog):
    cache.fetch_bytes("cpu", "obj", lambda: b"good object")
    (root / "cpu" / "obj" / cache.BLOB_FILE).write_bytes(b"evil object")
    with caplog.at_level(logging.WARNING, logger="fusecc.cache"):
        data, hit = cache.fetch_bytes("cpu", "obj", lambda: b"good object")
    assert (data, hit) == (b"good object", False) and "does not match its digest" in caplog.text


def test_an_added_file_counts_as_tampering(root):
    entry, _ = cache.fetch("cpu-harness", "k1", builder(b"code", []))
    (entry / "cuda_cpu.h.gch").write_bytes(b"a precompiled header nobody built")
    _, hit = cache.fetch("cpu-harness", "k1", builder(b"code", []))
    assert not hit and not (root / "cpu-harness" / "k1" / "cuda_cpu.h.gch").exists()


def test_no_lock_or_temporary_file_is_left_per_entry(root):
    for i in range(5):
        cache.fetch("cpu-harness", f"key{i}", builder(b"x" * i, []))
        cache.fetch_bytes("cpu", f"key{i}", lambda: b"y")
    for kind in ("cpu-harness", "cpu"):
        names = sorted(p.name for p in (root / kind).iterdir())
        assert names == [cache.LOCK_FILE] + [f"key{i}" for i in range(5)]
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*lock*")) == ["cpu-harness/.lock", "cpu/.lock"]


def test_a_failed_build_leaves_nothing_behind(root):
    def broken(folder: Path) -> None:
        (folder / "half").write_bytes(b"partial")
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="compiler crashed"):
        cache.fetch("cubin", "k1", broken)
    assert [p.name for p in (root / "cubin").iterdir()] == [cache.LOCK_FILE]


def test_least_recently_used_entries_are_evicted_past_the_limit(root, monkeypatch):
    monkeypatch.setenv("FUSECC_CACHE_MAX_BYTES", "3K")
    for i, key in enumerate(("a", "b", "c")):
        entry, _ = cache.fetch("cpu-harness", key, builder(bytes(900), []))
        os.utime(entry, (1000 + i, 1000 + i))  # a, b, c: oldest first
    cache.fetch("cpu-harness", "a", builder(bytes(900), []))  # a use makes "a" the newest
    cache.fetch("cpu-harness", "d", builder(bytes(900), []))  # 4 x ~1 KB > 3 KiB: evict the LRU one
    left = {p.name for p in (root / "cpu-harness").iterdir()} - {cache.LOCK_FILE}
    assert left == {"a", "c", "d"}


def test_the_newest_entry_survives_even_when_it_alone_is_too_big(root, monkeypatch):
    monkeypatch.setenv("FUSECC_CACHE_MAX_BYTES", "100")
    cache.fetch("cpu-harness", "old", builder(bytes(50), []))
    entry, _ = cache.fetch("cpu-harness", "big", builder(bytes(500), []))
    assert entry.exists() and not (root / "cpu-harness" / "old").exists()


@pytest.mark.parametrize("text, expected", [("", cache.DEFAULT_MAX_BYTES), ("4096", 4096), ("500M", 500 << 20), ("1.5G", 3 << 29), ("0", 0)])
def test_the_size_limit_comes_from_the_environment(monkeypatch, text, expected):
    monkeypatch.setenv("FUSECC_CACHE_MAX_BYTES", text)
    assert cache.max_bytes() == expected


def test_a_limit_of_zero_turns_the_disk_cache_off(root, monkeypatch):
    monkeypatch.setenv("FUSECC_CACHE_MAX_BYTES", "0")
    entry, hit = cache.fetch("cpu", "k1", builder(b"code", []))
    assert not hit and not root.exists()


def test_clear_removes_entries_and_nothing_else(root):
    cache.fetch("cpu-harness", "k1", builder(bytes(100), []))
    cache.fetch_bytes("cpu", "k2", lambda: bytes(10))
    (root / "notes.txt").write_text("the user's file")
    freed = cache.clear()
    assert freed >= 110 and cache.entries() == []
    assert (root / "notes.txt").read_text() == "the user's file"


def test_cubins_are_cache_entries_checked_before_loading(root, monkeypatch):
    """CudaRuntime.cubin without a GPU: NVRTC is replaced by a stub that
    counts compiles, the rest is the code a GPU run takes."""
    from types import SimpleNamespace

    from fusecc.runtime.cuda import runtime as cuda_runtime

    compiles = []
    monkeypatch.setattr(cuda_runtime, "nvrtc_version", lambda: (12, 8))
    monkeypatch.setattr(cuda_runtime, "compile_cuda", lambda source, *a, **k: compiles.append(source) or SimpleNamespace(code=b"cubin of " + source.encode()))
    gpu = cuda_runtime.CudaRuntime.__new__(cuda_runtime.CudaRuntime)
    gpu.arch, gpu.options, gpu.cache_root = "sm_90", cuda_runtime.NvrtcOptions(), None
    path = gpu.cubin("__global__ void k() {}")
    assert path.read_bytes() == b"cubin of __global__ void k() {}" and root in path.parents
    assert gpu.cubin("__global__ void k() {}") == path and len(compiles) == 1
    path.write_bytes(b"someone else's cubin")
    assert gpu.cubin("__global__ void k() {}").read_bytes() == b"cubin of __global__ void k() {}" and len(compiles) == 2


def test_a_tampered_cpu_harness_library_is_rebuilt_not_loaded(root):
    import shutil as sh

    if sh.which("g++") is None:
        pytest.skip("no host C++ compiler")
    from fusecc.runtime.cuda.cpu_harness.loader import CpuModule

    source = 'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\n'
    defines = ("FUSECC_CACHE_TEST",)  # no precompiled header: one compile each
    first = CpuModule.compile(source, "twice.cu", cache_dir=root, defines=defines)
    assert first.compiled and root in first.library.parents
    assert not CpuModule.compile(source, "twice.cu", cache_dir=root, defines=defines).compiled
    # Any change at all; by a new file, since the loaded library is mapped into this process.
    tampered = first.library.with_name("tampered")
    tampered.write_bytes(first.library.read_bytes() + b"\0")
    os.replace(tampered, first.library)
    again = CpuModule.compile(source, "twice.cu", cache_dir=root, defines=defines)
    assert again.compiled


def test_the_parser_tables_are_a_checked_entry(root, caplog):
    """The LALR tables are a pickle: a tampered entry is rebuilt, never unpickled."""
    from fusecc.compiler import syntax
    from fusecc.compiler.parser import parse_module

    syntax.lark_parser.cache_clear()
    parse_module("func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n  func.return %x : tensor<2xf32>\n}\n")
    (entry,) = [p for p in (root / "parser").iterdir() if p.is_dir()]
    (entry / cache.BLOB_FILE).write_bytes(b"cos\nsystem\n(S'echo owned'\ntR.")  # a pickle that would run a command
    syntax.lark_parser.cache_clear()
    with caplog.at_level(logging.WARNING, logger="fusecc.cache"):
        module = parse_module("func.func @g(%x: tensor<2xf32>) -> tensor<2xf32> {\n  func.return %x : tensor<2xf32>\n}\n")
    assert "does not match its digest" in caplog.text and module.body
    assert cache.counts.builds == 2 and cache.counts.hits == 0
    syntax.lark_parser.cache_clear()
