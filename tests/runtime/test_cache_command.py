"""`fusecc cache info|clear` (tools/cache_command.py over runtime/cache.py)."""

from __future__ import annotations

import json
import os
import re

import pytest

from fusecc.runtime import cache
from fusecc.tools import fusecc as driver


@pytest.fixture
def root(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("FUSECC_CACHE_DIR", str(path))
    monkeypatch.delenv("FUSECC_CACHE_MAX_BYTES", raising=False)
    cache._checked.cache_clear()
    monkeypatch.setattr(cache, "_warned", set())
    yield path
    cache._checked.cache_clear()


def fill(folder, size):
    (folder / "library.so").write_bytes(bytes(size))


def test_info_lists_entries_and_bytes_per_kind(root, capsys, monkeypatch):
    monkeypatch.setenv("FUSECC_CACHE_MAX_BYTES", "64M")
    cache.fetch("cpu-harness", "a", lambda f: fill(f, 2048))
    cache.fetch("cpu-harness", "b", lambda f: fill(f, 2048))
    cache.fetch_bytes("cpu", "c", lambda: bytes(100))
    assert driver.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert f"cache: {root} (in use)" in out and "64.0 MiB (FUSECC_CACHE_MAX_BYTES)" in out
    assert re.search(r"cpu-harness +2 entries", out) and re.search(r"cpu +1 entry ", out) and re.search(r"total +3 entries", out)
    assert driver.main(["cache", "info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["used"] and data["entries"] == 3 and data["kinds"]["cpu-harness"]["entries"] == 2
    assert data["limit_bytes"] == 64 << 20 and data["bytes"] >= 2 * 2048 + 100


def test_info_says_why_a_root_is_not_used(root, capsys):
    root.mkdir(mode=0o700)
    os.chmod(root, 0o777)
    assert driver.main(["cache", "info"]) == 0
    assert "NOT USED: it is writable by group and others" in capsys.readouterr().out


def test_clear_empties_the_cache(root, capsys):
    cache.fetch("cubin", "a", lambda f: fill(f, 1000))
    assert driver.main(["cache", "clear"]) == 0
    assert "removed 1 entry" in capsys.readouterr().out
    assert cache.entries() == [] and root.exists()
