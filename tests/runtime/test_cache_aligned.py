"""fetch_bytes with a blob built from chunks, and read back into aligned
memory (what runtime/cpu/image.py uses its constants from in place)."""

from __future__ import annotations

import numpy as np

from fusecc.runtime import cache


def test_chunks_are_stored_as_one_blob_and_read_back_aligned(tmp_path):
    chunks = [b"head", memoryview(np.arange(1000, dtype=np.float32)).cast("B"), b"tail"]
    joined = b"".join(bytes(c) for c in chunks)
    built, hit = cache.fetch_bytes("program", "k", lambda: chunks, root=tmp_path, aligned=True)
    assert hit is False and b"".join(bytes(c) for c in built) == joined
    assert (tmp_path / "program" / "k" / cache.DIGEST_FILE).read_text() == cache.blob_digest(joined)  # same digest as bytes
    found, hit = cache.fetch_bytes("program", "k", lambda: b"never built", root=tmp_path, aligned=True)
    assert hit is True and bytes(found) == joined
    array = np.frombuffer(found, dtype=np.uint8)
    assert array.ctypes.data % 4096 == 0 and array.flags.writeable  # page-aligned, private memory
    array[0] ^= 1  # writing it leaves the entry alone
    again, hit = cache.fetch_bytes("program", "k", lambda: b"never built", root=tmp_path)
    assert hit is True and again == joined and isinstance(again, bytes)


def test_a_damaged_aligned_blob_is_rebuilt(tmp_path, caplog):
    cache.fetch_bytes("program", "k", lambda: [b"abc", b"def"], root=tmp_path)
    (tmp_path / "program" / "k" / cache.BLOB_FILE).write_bytes(b"abcdeX")
    with caplog.at_level("WARNING", logger="fusecc.cache"):
        value, hit = cache.fetch_bytes("program", "k", lambda: b"abcdef", root=tmp_path, aligned=True)
    assert hit is False and value == b"abcdef"
    assert "does not match its digest" in caplog.text
